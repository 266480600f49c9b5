"""A client's per-request output written as a prefixbench run folder (requests.parquet,
summary.json with the same definitions as the harness's own runs, manifest.json naming the
client), so `python -m harness.report` sets it beside the built-in designs' runs and the twin's.
`python -m harness.report --import CLIENT PATH [RESULTS_DIR] [--out RUN_DIR] [--server-log FILE]`;
the importers are registered here, one per client whose output was produced and read on this
machine; `--server-log` joins the rows to the built-in server's request log (join.py)."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from harness.config.errors import BAD_INPUT, BadInput
from harness.export.import_aiperf import Imported, import_aiperf
from harness.export.import_guidellm import import_guidellm
from harness.export.import_inference_perf import import_inference_perf
from harness.export.import_sglang_bench import import_sglang_bench
from harness.export.import_vllm_bench import import_vllm_bench
from harness.export.join import join_server_log
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.summary import RunContext
from harness.results.run_dir import RunDir
from workloads.registry import Registry

# registry: every client whose output imports as a run (harness.report --import CLIENT PATH)
IMPORTERS: Registry[Callable[[Path], Imported]] = Registry("import client")
IMPORTERS.add("aiperf", import_aiperf)
IMPORTERS.add("guidellm", import_guidellm)
IMPORTERS.add("inference-perf", import_inference_perf)
IMPORTERS.add("vllm-bench", import_vllm_bench)  # vllm bench serve --save-result --save-detailed
IMPORTERS.add("sglang-bench", import_sglang_bench)  # sglang.bench_serving --output-details


def workload_name(imported: Imported) -> str:
    """The client's dataset file stem (a trace exported by harness.export keeps the run's name
    before its first dot), else the client's name."""
    dataset = imported.facts.get("dataset")
    path = dataset.get("path") if isinstance(dataset, dict) else None
    return Path(str(path)).name.split(".")[0] if path else imported.client


def run_table(imported: Imported, context: RunContext) -> pd.DataFrame:
    order = ["session_num", "turn"] if "session_num" in imported.table else ["arrival_s"]
    table = imported.table.sort_values(order, kind="stable").reset_index(drop=True)
    table["cached_tokens"] = table["cached_tokens"].astype("Int64")
    return table.assign(
        request_index=range(len(table)),
        workload=context.workload,
        engine=context.engine,
        run_id=context.run_id,
        queue_delay_ms=float("nan"),  # a client cannot see the server's queue
        recomputed_tokens=0,
        num_preemptions=0,
    )


def write_imported(imported: Imported, out: Path, joined: dict[str, object] | None = None) -> Path:
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"{out}: already holds files; an import writes a new run folder")
    name = workload_name(imported)
    context = RunContext(name, 1, imported.client, "client", 0, 0, out.name)
    table = run_table(imported, context)
    known = table.dropna(subset=["cached_tokens"])
    summary = summary_dict(
        summarize(
            table.assign(cached_tokens=table["cached_tokens"].fillna(0).astype(int)),
            imported.itls_ms,
            imported.duration_s,
            {
                "status": "ok",
                "backend": imported.client,
                "model_id": imported.facts.get("model"),
                "client": imported.client,
                "client_version": imported.client_version,
                "cached_tokens_reported": len(known),
                "load_mode": "client",
                # the bounds need the prompts' token ids, which a client's output does not hold
                "ideal_hit_rate": None,
                "theoretical_hit_rate_capped": None,
                "belady_hit_rate": None,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S"),
            },
            context=context,
            num_failed=imported.failed,
        )
    )
    if len(known) < len(table):  # a server that reports no cached tokens: no hit rate to claim
        summary["hit_rate"] = None
    if not any(len(v) for v in imported.itls_ms.values()):  # the client kept no token gaps
        summary.update({k: None for k in summary if k.endswith("_itl_ms")})
    if not table["arrival_s"].notna().all():  # no start times (SGLang's bench): no overlap
        summary.update(max_concurrent_requests=None, max_overlapping_requests=None)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    manifest = {
        "created_utc": created,
        "seed": None,
        "config": {
            "workload": {"name": name, "family": "imported"},
            "engine": {"cache": imported.client},
            "model": {"name": imported.facts.get("model")},
            "executor": "client",
            "label": f"{imported.client} import",
        },
        "client": {
            "name": imported.client,
            "version": imported.client_version,
            **imported.facts,
            **({"server": joined} if joined else {}),
        },
        "packages": {imported.client: imported.client_version},
    }
    run = RunDir(out)
    run.write_requests(table)
    run.write_manifest(manifest)
    run.write_summary(summary)
    return out


def import_main(client: str, path: Path, out: Path, server_log: Path | None = None) -> int:
    """`harness.report --import`: one line and exit 2 on bad input, nothing written."""
    try:
        imported = IMPORTERS.get(client)(path)
        joined = None
        if server_log is not None:
            imported, joined = join_server_log(imported, server_log)
        written = write_imported(imported, out, joined)
    except BAD_INPUT + (OSError,) as exc:
        print(
            f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
            file=sys.stderr,
        )
        return 2
    print(written)
    return 0
