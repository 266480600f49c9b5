"""One finished run as the exporters read it: its summary, manifest and request table, loaded
strictly. A folder that is not a finished run (no summary.json, a failed or incomplete run, a file
that does not parse, a request table without the columns every run writes) is refused with one
line naming it, before anything is written."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from harness.config.errors import BadInput
from harness.results.load import load_run
from harness.results.run_dir import RunDir

# Columns without which a table is not a run's; the timing columns (every target writes them) are
# read through `column`, so a table from an older or hand-made run exports what it has.
REQUIRED_COLUMNS = ("request_id", "prompt_tokens", "cached_tokens")


@dataclass(frozen=True)
class RunView:
    path: Path
    summary: dict
    manifest: dict
    requests: pd.DataFrame

    @property
    def config(self) -> dict:
        return self.manifest.get("config") or {}

    def group(self, name: str) -> dict:
        """One config group (workload, engine, load, ...); {} when the run has none."""
        value = self.config.get(name)
        return value if isinstance(value, dict) else {}

    def column(self, name: str) -> pd.Series:
        """A request column; all-missing (NaN) when the table has none."""
        if name in self.requests:
            return self.requests[name]
        return pd.Series(float("nan"), index=self.requests.index, dtype=float)

    @property
    def kind(self) -> str:
        """Which target made the run: server, fleet, simulated, engine, or client (a load
        generator's output imported by harness/export/import_run.py)."""
        if self.config.get("executor") == "client":
            return "client"
        if self.config.get("server"):
            return "server"
        if int(self.group("fleet").get("replicas") or 1) > 1:
            return "fleet"
        return "simulated" if self.config.get("executor") == "simulated" else "engine"


def read_run(path: str | Path) -> RunView:
    """The finished run at `path`; BadInput (one line) for anything else."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"{path}: not a run directory (no such folder)")
    if not (path / RunDir.SUMMARY).is_file():
        raise BadInput(f"{path}: not a run directory (no {RunDir.SUMMARY})")
    try:
        summary, requests, manifest = load_run(path)
    except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInput(f"{path}: unreadable run ({first})") from None
    status = summary.get("status")
    if status != "ok":
        raise BadInput(f"{path}: run status is {status!r}; only finished runs (ok) are exported")
    if not manifest.get("config"):
        raise BadInput(f"{path}: {RunDir.MANIFEST} holds no config; not a prefixbench run")
    missing = [c for c in REQUIRED_COLUMNS if c not in requests.columns]
    if missing:
        raise BadInput(f"{path}: {RunDir.REQUESTS} lacks the columns {', '.join(missing)}")
    return RunView(path, summary, manifest, requests)
