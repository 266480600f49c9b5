"""aiperf 0.13.0 (scripts/setup_clients.sh, an environment of its own) replays a trace that
`harness.export --format mooncake` wrote, against `harness.builtin_server` (apc, model
smollm2-rand, in this process on a loopback port); its per-request output, imported, gives the
same cached tokens per request as the in-process run of the workload, and joined to the server's
request log by the X-Request-ID aiperf sent, the server's own count on every row. Skipped without
.venv-clients, a failure under CI=true (.ci/run builds it; docs/interop.md §6)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from harness.export.import_aiperf import import_aiperf
from harness.export.join import join_server_log
from tests.client_util import CLIENTS_HF_HOME, client_env, need, serving
from tests.export_support import ZIPF_SYSTEM_PROMPT, export
from tests.harness_util import ROOT, SMALL, InProcessRun, merged, run_harness

AIPERF = ROOT / ".venv-clients" / "bin" / "aiperf"
SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]

pytestmark = [pytest.mark.slow]


def aiperf_replay(url: str, trace, out, model: str = "smollm2-rand") -> subprocess.CompletedProcess:
    args = [
        str(AIPERF),
        "profile",
        "--model",
        model,
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--tokenizer",
        "prefixbench/smollm2",
        "--input-file",
        str(trace),
        "--custom-dataset-type",
        "mooncake_trace",
        "--isl-block-size",
        "16",
        "--concurrency",  # one at a time, in the trace's order
        "1",
        "--request-count",
        "12",
        "--output-artifact-dir",
        str(out),
        "--ui-type",
        "none",
    ]
    return subprocess.run(args, env=client_env(), capture_output=True, text=True, timeout=400)


def exported_trace(tmp_path: Path) -> tuple[InProcessRun, Path]:
    """The simulated run of the small Zipf system-prompt workload, one request at a time, and
    the Mooncake trace `python -m harness.export` writes of it."""
    one = ["load.max_concurrency=1"]
    original = run_harness(merged(SMALL, ZIPF_SYSTEM_PROMPT, SIM, one), tmp_path / "orig")
    assert original.returncode == 0, original.stderr
    code, _, err = export("--format", "mooncake", str(original.run_dir), "--out", str(tmp_path))
    assert code == 0, err
    return original, tmp_path / "orig.mooncake.jsonl"


def test_aiperf_replay_of_an_exported_trace_matches_the_in_process_run(tmp_path):
    """One request at a time on both sides: under a burst, how a loaded machine splits the
    arrivals into steps decides which request of a group hits, so the comparison would be of
    timing, not of prefix structure."""
    need(AIPERF), need(CLIENTS_HF_HOME)
    original, trace = exported_trace(tmp_path)
    log = tmp_path / "server_requests.jsonl"
    with serving(log, "smollm2-rand") as server:
        proc = aiperf_replay(server.url, trace, tmp_path / "aip")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    joined, facts = join_server_log(import_aiperf(tmp_path / "aip"), log)
    assert facts["rows_joined"] == len(joined.table)
    served = joined.table.sort_values("session_num")
    assert served["cached_tokens"].tolist() == served["server_cached_tokens"].tolist()
    local = pd.read_parquet(original.run_dir / "requests.parquet").sort_values("request_index")
    assert served["prompt_tokens"].tolist() == local["prompt_tokens"].tolist()
    assert served["cached_tokens"].tolist() == local["cached_tokens"].tolist()
