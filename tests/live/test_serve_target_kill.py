"""The live-server target when its server dies: a `python -m harness.builtin_server` child is
killed mid-run and the run keeps the rows it had (the in-process server's cases are
tests/run/test_serve_target.py).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pandas as pd

from harness.builtin_server.server import free_port
from harness.results.rowlog import count_rows
from tests.harness_util import ROOT, run_harness

# The same engine knobs for the server and the in-process run; the twin's scheduling limits
# (server.max_num_seqs / max_num_batched_tokens) are set to the same values.
KNOBS = [
    "engine.kv_capacity_tokens=4096",
    "engine.max_num_batched_tokens=256",
    "engine.max_num_seqs=16",
    "engine.backend=torch",
]
QUIET = ["warmup.enabled=false"]  # no warm-up, no probe: the step logs hold the workload only


def test_server_process_killed_mid_run_keeps_rows(tmp_path, tokenizer):
    """A `python -m harness.builtin_server` process killed after three replies: every request is a row,
    the run fails with exit 1."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "harness.builtin_server", "model=tiny", "device=cpu", f"port={port}",
         *KNOBS, "log_level=warning"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_dir = tmp_path / "killed"
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", server)

        def kill_after_rows() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and count_rows(run_dir / "rows.jsonl") < 3:
                time.sleep(0.02)
            server.kill()

        killer = threading.Thread(target=kill_after_rows, daemon=True)
        killer.start()
        run = run_harness(
            [
                "server=vllm",
                f"server.url=http://127.0.0.1:{port}",
                f"server.tokenizer={tokenizer}",
                *QUIET,
                "workload=system_prompt",
                "workload.num_groups=2",
                "workload.prompts_per_group=6",
                "workload.output_len=64",  # long enough that the kill lands mid-run
                "load.max_concurrency=1",
            ],
            run_dir,
        )
        killer.join(5)
    finally:
        server.kill()
        server.wait(10)
    assert run.returncode == 1
    summary = run.summary
    assert summary["status"] == "failed" and "no complete reply" in summary["error"]
    table = pd.read_parquet(run_dir / "requests.parquet")
    assert len(table) == 12  # every request is a row
    assert (table["status"] == "ok").sum() >= 3
    failed = table[table["status"] != "ok"]
    assert len(failed) >= 1 and failed["error"].str.len().gt(0).all()
    assert summary["failed"] == len(failed)


def _wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server process exited"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} never became healthy")
