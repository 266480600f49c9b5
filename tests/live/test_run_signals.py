"""Real signals and sweeps in a child `python -m harness`: SIGINT and SIGTERM mid-run keep the
finished rows (status `interrupted`, exit 130), SIGKILL keeps them too, a signal during start-up
is a clean exit, and a bad job in a sweep is recorded as failed beside the good one. The same
promises injected in-process: tests/run/test_run_faults.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.results.rowlog import rows_table
from harness.run.execute import EXIT_INTERRUPTED
from tests.cli_util import harness
from tests.harness_util import (
    BASE,
    ROOT,
    assert_failed_run_dir,
    merged,
    summary_of,
    with_base,
)

NUM_REQUESTS = 6  # BASE: 2 groups x 3 prompts of 48 + 8 tokens, 4 output tokens


# ------------------------------------------------------------------ signals (subprocess)

# 8 requests released over ~4 s (Poisson at 2 req/s): still running after the first one finishes.
STAGGERED = with_base(["workload.prompts_per_group=4", "load.mode=poisson", "load.rate=2"])
PROGRESS = re.compile(r"\b([1-7])/8\b")  # the runner's progress bar on stderr


def start_harness(args: list[str], run_dir: Path, log: Path) -> subprocess.Popen:
    # PREFIXBENCH_PROGRESS=1: the progress bar is drawn although stderr is a file.
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PREFIXBENCH_PROGRESS": "1",
    }
    cmd = [sys.executable, "-m", "harness", *args, f"hydra.run.dir={run_dir}"]
    with log.open("w") as err:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)


def wait_for_progress(proc: subprocess.Popen, log: Path, timeout_s: float = 120.0) -> None:
    """Until at least one request finished (and not all of them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if PROGRESS.search(log.read_text()):
            return
        assert proc.poll() is None, f"the run ended before any progress: {log.read_text()[-2000:]}"
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no progress within {timeout_s} s: {log.read_text()[-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_run_writes_finished_rows_as_interrupted(sig, tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = start_harness(STAGGERED, run_dir, log)
    wait_for_progress(proc, log)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == EXIT_INTERRUPTED, log.read_text()[-2000:]
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted"
    table = pd.read_parquet(run_dir / "requests.parquet")
    assert 1 <= len(table) < 8 and summary["completed"] == len(table)
    assert table["output_tokens"].eq(4).all()  # only finished requests have rows
    assert (run_dir / "manifest.json").exists()
    last = [ln for ln in log.read_text().splitlines() if ln.strip()][-1]
    assert last.startswith("error: ") and "finished rows were written" in last


def test_sigkill_keeps_the_finished_rows(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = start_harness(STAGGERED, run_dir, log)
    wait_for_progress(proc, log)
    proc.kill()  # SIGKILL: no handler runs, as in a crash or an OOM kill
    proc.wait(timeout=60)
    assert not (run_dir / "summary.json").exists()  # nothing that looks finished
    assert not (run_dir / "requests.parquet").exists()
    rows = rows_table(run_dir / "rows.jsonl")
    finished = int(PROGRESS.findall(log.read_text())[-1])
    assert 1 <= finished <= len(rows) < 8  # every request the bar counted has its row
    assert rows["output_tokens"].eq(4).all() and rows["request_id"].is_unique


def test_sweep_with_one_bad_job_keeps_the_good_one(tmp_path):
    sweep_dir = tmp_path / "sweep"
    sweep = [
        "engine.kv_capacity_tokens=4096,32",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweep.subdir=${hydra.job.num}",
    ]
    args = ["-m", *merged(BASE, sweep)]  # Hydra's argparse wants flags before the overrides
    proc = harness(args, tmp_path / "unused")
    assert proc.returncode == 2, proc.stderr[-3000:]
    good, bad = sweep_dir / "0", sweep_dir / "1"
    assert summary_of(good)["status"] == "ok"
    assert len(pd.read_parquet(good / "requests.parquet")) == NUM_REQUESTS
    assert summary_of(bad)["status"] == "failed"
    assert_failed_run_dir(bad)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors[0].startswith("error: job 1: request g1-q0 needs 60 KV tokens"), proc.stderr
    assert errors[-1] == "error: 1 of 2 jobs did not finish ok"


# ------------------------------------------------------------------ in-process fault injection


# ------------------------------------------------------------------ leak checks


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_during_start_up_is_a_clean_interrupted_exit(sig, tmp_path):
    """Imports and the preflight take seconds: an interrupt there ends like one during the run."""
    run_dir, log = tmp_path / "run", tmp_path / "stderr.txt"
    proc = start_harness(BASE, run_dir, log)
    time.sleep(1.0)  # still importing torch and hydra
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == EXIT_INTERRUPTED, log.read_text()[-2000:]
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    assert lines == [f"error: {sig.name} during start-up; nothing was run"], lines
    assert not run_dir.exists()
