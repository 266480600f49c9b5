"""One run as an llm-d Benchmark Report v0.2 document (schema revision 0.2.1, the package
`llmd-benchmark-report`): `run` (ids and times), `scenario` (harness/export/br02_stack.py,
harness/export/br02_load.py) and `results` (harness/export/br02_results.py). Plain JSON: the
package is needed only to validate (harness/export/validate.py), never to write."""

from __future__ import annotations

import datetime
import uuid

from harness.export.br02_load import scenario_load
from harness.export.br02_results import results
from harness.export.br02_stack import scenario_stack
from harness.export.run_view import RunView

VERSION = "0.2.1"
# uuid5 namespace of prefixbench's report ids: the same run always gets the same uid.
UID_NAMESPACE = uuid.UUID("6f1d3c52-8d1e-4b5e-9a57-3a0c1f2b7e44")


def _iso_duration(seconds: object) -> str | None:
    try:
        value = float(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f"PT{value:.6f}S" if value >= 0 and value != float("inf") else None


def run_section(run: RunView) -> dict[str, object]:
    """Ids: `uid` from the config fingerprint and creation time (stable across exports), `eid`
    the config fingerprint (repeats of one configuration share it). Times: the manifest's
    creation time and the measured window's length (virtual seconds on the simulated clock)."""
    m, s = run.manifest, run.summary
    created = m.get("created_utc")
    fp = m.get("config_fingerprint") or "unknown"
    time: dict[str, object] = {"duration": _iso_duration(s.get("duration"))}
    if isinstance(created, str):
        time["start"] = datetime.datetime.fromisoformat(created).isoformat()
    workload = run.group("workload").get("name")
    keywords = ["prefixbench", str(run.group("engine").get("cache")), str(workload), run.kind]
    if s.get("clock"):
        keywords.append(f"clock:{s['clock']}")
    label = run.config.get("label")
    return {
        "uid": str(uuid.uuid5(UID_NAMESPACE, f"{fp}/{created}/{run.path.name}")),
        "eid": fp,
        "time": {k: v for k, v in time.items() if v is not None},
        "description": f"prefixbench {run.kind} run of {workload} on {s.get('backend')}"
        + (f" (label {label})" if label else ""),
        "keywords": keywords,
    }


def br02_document(run: RunView) -> dict[str, object]:
    version = str((run.manifest.get("packages") or {}).get("prefixbench") or "unknown")
    return {
        "version": VERSION,
        "run": run_section(run),
        "scenario": {
            "stack": scenario_stack(run, version),
            "load": scenario_load(run, version),
        },
        "results": results(run),
    }
