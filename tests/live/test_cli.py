"""`python -m harness` end to end on the tiny model: files, fields, determinism, two runs at once.

One real command-line run is shared by the tests below; the runs it is compared with go through
`harness.run.execute` in-process (tests/harness_util.py). Bad input through the command line is in
tests/run/test_bad_input.py (its table in-process, a few cases as real command lines).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from harness.results.columns import TIMING_COLUMNS
from tests.cli_util import harness
from tests.harness_util import ROOT, SMALL, SYSTEM_PROMPT_SMALL, run_harness


@pytest.fixture(scope="module")
def apc_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "apc"
    proc = harness([*SYSTEM_PROMPT_SMALL, "engine=apc", *SMALL, "save_tokens=true"], run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir, proc


def test_run_writes_results(apc_run):
    run_dir, proc = apc_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == summary
    for key in (
        "completed",
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p90_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_itl_ms",
        "median_e2el_ms",
        "hit_rate",
        "ideal_hit_rate",
        "cache_bookkeeping_ms",
        "evictions",
        "status",
    ):
        assert key in summary, key
    assert summary["completed"] == 6 and summary["status"] == "ok"
    assert summary["cache_flushed"] is True and summary["warmup_policy"] == "unrelated"
    table = pd.read_parquet(run_dir / "requests.parquet")
    for col in (
        "request_id",
        "session_id",
        "turn",
        "sample_index",
        "prompt_tokens",
        "cached_tokens",
        "output_tokens",
        "arrival_s",
        "first_token_s",
        "finish_s",
        "ttft_ms",
        "tpot_ms",
        "e2el_ms",
        "num_preemptions",
    ):
        assert col in table.columns, col
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["seed"] == 0 and "git_sha" in manifest and "config" in manifest
    lines = (run_dir / "tokens.jsonl").read_text().splitlines()
    assert len(lines) == 6 and set(json.loads(lines[0])) >= {
        "request_id",
        "prompt_ids",
        "output_ids",
    }
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert len(manifest["config_fingerprint"]) == 12 and not (run_dir / "rows.jsonl").exists()
    for path in run_dir.iterdir():
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o644, path  # readable in a shared folder
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert err_lines[-1].split("\r")[-1].strip() == f"run directory: {run_dir}"
    assert "Serving Benchmark Result" in (run_dir / "harness.log").read_text()
    for duplicate in (
        "hit_rate_tokens",
        "engine_hit_rate",
        "theoretical_hit_rate",
        "prime_policy",
        "prime_validated",
    ):
        assert duplicate not in summary


def test_same_seed_same_requests_table(apc_run, tmp_path):
    """The command-line run and an in-process run of the same config: the same requests table."""
    run_dir, _ = apc_run
    again = run_harness(
        [*SYSTEM_PROMPT_SMALL, "engine=apc", *SMALL, "save_tokens=true"], tmp_path / "again"
    )
    assert again.returncode == 0, again.stderr[-3000:]
    a = pd.read_parquet(run_dir / "requests.parquet").drop(
        columns=list(TIMING_COLUMNS) + ["run_id"], errors="ignore"
    )
    b = pd.read_parquet(tmp_path / "again" / "requests.parquet").drop(
        columns=list(TIMING_COLUMNS) + ["run_id"], errors="ignore"
    )
    pd.testing.assert_frame_equal(a, b)
    assert (run_dir / "tokens.jsonl").read_text() == (
        tmp_path / "again" / "tokens.jsonl"
    ).read_text()


def test_radix_run(tmp_path):
    # One prompt a prefill step: SGLang's overlap loop (radix's default) matches a prompt from two
    # steps after its prefill, so a burst prefilled in two steps would hit nothing.
    one_a_step = "engine.max_num_batched_tokens=64"
    run = run_harness(
        [*SYSTEM_PROMPT_SMALL, "engine=radix", *SMALL, one_a_step], tmp_path / "radix"
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = run.summary
    assert summary["status"] == "ok" and summary["backend"] == "radix"
    assert 0 < summary["hit_rate"] <= summary["ideal_hit_rate"] + 1e-9


def test_two_runs_at_once_with_default_directories_both_complete(tmp_path):
    """Same workload, engine and seed, started together: two directories, two finished runs."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "harness", *SYSTEM_PROMPT_SMALL, *SMALL]
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for e in errs]
    runs = sorted((tmp_path / "results").iterdir())
    assert len(runs) == 2 and all(r.name.endswith("-system_prompt-apc-seed0") for r in runs), runs
    for run in runs:
        assert json.loads((run / "summary.json").read_text())["status"] == "ok"
    named = {e.strip().splitlines()[-1].split("\r")[-1].strip() for e in errs}
    assert named == {f"run directory: {r}" for r in runs}
