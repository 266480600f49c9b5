"""Faults never lose a finished run and never pass for a good one, injected in-process through
`harness.run.execute.execute` (the code the CLI runs): an interrupt keeps exactly the finished
rows, a crash or a kill mid-write leaves no truncated file and no `ok` summary, and an injected KV
leak fails the run at idle and, with engine.debug_checks, at the step that leaked. Real signals in
a child process: tests/live/test_run_signals.py.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from engines.cache.apc.block_pool import BlockPool
from engines.cache.radix.allocator import TokenToKVPoolAllocator
from harness.__main__ import _on_signal
from harness.results.columns import TIMING_COLUMNS
from harness.results.rowlog import rows_table
from harness.results.run_dir import RunDir
from harness.run import engine_target
from harness.run.execute import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, execute
from harness.run.pipeline import RunInterrupted
from tests.harness_util import (
    compose_config,
    summary_of,
    with_base,
)

NUM_REQUESTS = 6  # BASE: 2 groups x 3 prompts of 48 + 8 tokens, 4 output tokens


# ------------------------------------------------------------------ signals (subprocess)


# ------------------------------------------------------------------ in-process fault injection


def run_in_process(tmp_path: Path, args: Sequence[str] = ()) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    return execute(compose_config(with_base(list(args))), run_dir), run_dir


def interrupt_measured_run_after(monkeypatch, num_finished: int) -> None:
    """Raise KeyboardInterrupt (what SIGINT does) once `num_finished` measured requests finished
    (were delivered to the pipeline: a step can finish several, the interrupt lands between)."""
    original = engine_target.drive
    delivered: list[object] = []

    def drive(engine, requests, on_finish=None, **kwargs):
        if on_finish is None:  # the warm-up
            return original(engine, requests, **kwargs)

        def finish(record):
            on_finish(record)
            delivered.append(record)
            if len(delivered) >= num_finished:
                raise KeyboardInterrupt

        return original(engine, requests, on_finish=finish, **kwargs)

    monkeypatch.setattr(engine_target, "drive", drive)


def test_interrupt_keeps_exactly_the_finished_rows(tmp_path, monkeypatch, capsys):
    interrupt_measured_run_after(monkeypatch, 2)
    code, run_dir = run_in_process(tmp_path)
    assert code == EXIT_INTERRUPTED
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted" and summary["completed"] == 2
    table = pd.read_parquet(run_dir / "requests.parquet")
    assert len(table) == 2 and table["output_tokens"].eq(4).all()
    assert "finished rows were written" in capsys.readouterr().err


def test_rows_file_matches_the_request_table(tmp_path, monkeypatch):
    kept = {}
    original = RunDir.write_requests

    def write_requests(self, df):
        kept["rows"] = rows_table(self.rows_path)  # still there: removed after the parquet
        original(self, df)

    monkeypatch.setattr(RunDir, "write_requests", write_requests)
    code, run_dir = run_in_process(tmp_path)
    assert code == EXIT_OK and not (run_dir / "rows.jsonl").exists()
    table = pd.read_parquet(run_dir / "requests.parquet")
    key = ["request_id", "cached_tokens", "prompt_tokens", "output_tokens"]
    pd.testing.assert_frame_equal(
        kept["rows"][key].sort_values("request_id").reset_index(drop=True),
        table[key].sort_values("request_id").reset_index(drop=True),
    )
    assert set(kept["rows"].columns) >= set(TIMING_COLUMNS)


def test_crash_after_measuring_keeps_the_rows_and_prints_the_traceback(
    tmp_path, monkeypatch, capsys
):
    def boom(*args, **kwargs):
        raise ValueError("a bug in the summary, not bad input")

    monkeypatch.setattr("harness.run.pipeline.summarize", boom)
    code, run_dir = run_in_process(tmp_path)
    assert code == EXIT_FAILED
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["completed"] == NUM_REQUESTS
    assert len(pd.read_parquet(run_dir / "requests.parquet")) == NUM_REQUESTS
    err = capsys.readouterr().err
    assert "Traceback" in err and "error: ValueError: a bug in the summary" in err


def test_interrupt_before_measuring_records_no_rows(tmp_path, monkeypatch, capsys):
    def warm_up_interrupted(engine, requests, on_finish=None, **kwargs):
        raise RunInterrupted("SIGTERM")

    monkeypatch.setattr(engine_target, "drive", warm_up_interrupted)
    code, run_dir = run_in_process(tmp_path)
    assert code == EXIT_INTERRUPTED
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted" and summary["completed"] == 0
    assert not (run_dir / "requests.parquet").exists()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == ["error: SIGTERM outside the measured run; 0 finished rows were written"]


def _warm_up_interrupted(engine, requests, on_finish=None, **kwargs):
    raise RunInterrupted("SIGTERM")


def _summary_crash(*args, **kwargs):
    raise ValueError("a bug in the summary")


# fault -> (what is replaced, by what, the exit code)
FAULTS = {
    "none": (None, None, EXIT_OK),
    "interrupted setting up": (
        "harness.run.engine_target.drive",
        _warm_up_interrupted,
        EXIT_INTERRUPTED,
    ),
    "crash after measuring": ("harness.run.pipeline.summarize", _summary_crash, EXIT_FAILED),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_garbage_collector_is_back_after_any_run(tmp_path, monkeypatch, fault):
    # The runner sets up with the collector paused and measures with the set-up objects frozen;
    # an in-process caller (a sweep's next job, a test) gets the collector back as it was.
    target, replacement, want = FAULTS[fault]
    if target is not None:
        monkeypatch.setattr(target, replacement)
    code, _ = run_in_process(tmp_path)
    assert code == want
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_signal_while_writing_waits_for_the_files(tmp_path, monkeypatch):
    previous = signal.signal(signal.SIGTERM, _on_signal)  # the CLI's handler
    original = RunDir.write_requests

    def write_requests(self, df):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the results are being written
        original(self, df)

    monkeypatch.setattr(RunDir, "write_requests", write_requests)
    try:
        code, run_dir = run_in_process(tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == EXIT_OK
    assert summary_of(run_dir)["status"] == "ok"
    assert len(pd.read_parquet(run_dir / "requests.parquet")) == NUM_REQUESTS


def test_crash_while_writing_leaves_no_truncated_parquet(tmp_path, monkeypatch, capsys):
    def write_half_then_fail(table, where, **kwargs):
        where.write(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", write_half_then_fail)  # harness.results.pq
    code, run_dir = run_in_process(tmp_path)
    assert code == EXIT_FAILED
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert not (run_dir / "requests.parquet").exists()
    assert not list(run_dir.glob(".*.tmp"))  # the temporary file is gone too
    assert "error: OSError" in capsys.readouterr().err
    assert len(rows_table(run_dir / "rows.jsonl")) == NUM_REQUESTS  # the rows are still on disk


# ------------------------------------------------------------------ leak checks

# Sequential requests; radix frees slots only when it evicts, so its pool is small.
LEAKY = {
    "apc": ["engine=apc", "engine.max_num_seqs=1", "warmup.enabled=false"],
    "radix": [
        "engine=radix",
        "engine.kv_capacity_tokens=96",
        "engine.max_num_seqs=1",
        "engine.max_num_batched_tokens=64",
        "warmup.enabled=false",
    ],
}
# Where a free happens: (class, method); the injected leak drops one block or slot per call.
# The tree frees a node's value and a request's row segment through free_segment (page 1: the
# same function as free).
FREES = {"apc": (BlockPool, "free_blocks"), "radix": (TokenToKVPoolAllocator, "free_segment")}


def inject_leak(monkeypatch, cache: str) -> None:
    cls, name = FREES[cache]
    original = getattr(cls, name)
    monkeypatch.setattr(
        cls, name, lambda self, items, *rest: original(self, list(items)[:-1], *rest)
    )


@pytest.mark.parametrize("cache", list(LEAKY))
def test_no_leak_without_injection(cache, tmp_path, monkeypatch):
    cls, name = FREES[cache]
    original, calls = getattr(cls, name), []
    monkeypatch.setattr(
        cls, name, lambda self, items, *rest: (calls.append(1), original(self, items, *rest))[1]
    )
    code, run_dir = run_in_process(tmp_path, [*LEAKY[cache], "engine.debug_checks=true"])
    summary = summary_of(run_dir)
    assert code == EXIT_OK and summary["status"] == "ok", summary.get("error")
    assert calls  # the injection point below is exercised by this run


@pytest.mark.parametrize("cache", list(LEAKY))
def test_leak_fails_the_idle_check(cache, tmp_path, monkeypatch, capsys):
    inject_leak(monkeypatch, cache)
    code, run_dir = run_in_process(tmp_path, LEAKY[cache])
    assert code == EXIT_FAILED
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["error"].startswith("cache leak check: ")
    assert "error: run failed: cache leak check: " in capsys.readouterr().err


@pytest.mark.parametrize("cache", list(LEAKY))
def test_leak_fails_the_step_in_debug_mode(cache, tmp_path, monkeypatch, capsys):
    inject_leak(monkeypatch, cache)
    code, run_dir = run_in_process(tmp_path, [*LEAKY[cache], "engine.debug_checks=true"])
    assert code == EXIT_FAILED
    summary = summary_of(run_dir)
    assert summary["status"] == "failed" and summary["error"].startswith("CacheIntegrityError: ")
    # The run stopped at the leaking step; the rows finished before it are kept, marked failed.
    assert summary["completed"] < 6
    assert "error: run failed: CacheIntegrityError: " in capsys.readouterr().err
