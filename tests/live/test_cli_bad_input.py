"""Bad input through the real command line (`python -m harness` in a child process): one `error: `
line, exit 2, and no run folder left that looks real. The table of cases runs in-process in
tests/run/test_bad_input.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

from harness.run.execute import EXIT_BAD_INPUT
from tests.bad_input_util import TRACE, prepare
from tests.cli_util import harness
from tests.harness_util import (
    BASE,
    ROOT,
    assert_failed_run_dir,
    merged,
    with_base,
)

# ---------------------------------------------------------------- the CLI end to end (subprocesses)


def _assert_one_error_line(proc, needle: str) -> None:
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


def test_cli_static_problem_makes_no_run_directory(tmp_path):
    run_dir = tmp_path / "bad"
    proc = harness(merged(BASE, ["load.slowdown=inf"]), run_dir, timeout=120)
    _assert_one_error_line(proc, "load.slowdown must be a positive finite number")
    assert not run_dir.exists()


def test_cli_simulated_without_hardware_makes_no_run_directory(tmp_path):
    run_dir = tmp_path / "bad"
    proc = harness(merged(BASE, ["executor=simulated"]), run_dir, timeout=120)
    _assert_one_error_line(proc, "executor=simulated needs a cost model")
    assert not run_dir.exists()


def test_cli_nan_timestamp_leaves_no_run_folder(tmp_path):
    """Refused after Hydra made the folder: the folder goes (a failed one would be counted by
    every later report); a folder that was there before keeps what it held."""
    prepare(tmp_path)
    run_dir = tmp_path / "bad"
    bad_trace = with_base([*TRACE, f"workload.path={tmp_path}/nan_time.jsonl"])
    proc = harness(bad_trace, run_dir, timeout=120)
    _assert_one_error_line(proc, "nan_time.jsonl:2: not valid JSON (NaN is not allowed")
    assert not run_dir.exists()
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine\n")
    proc = harness(bad_trace, run_dir, timeout=120)
    _assert_one_error_line(proc, "nan_time.jsonl:2: not valid JSON (NaN is not allowed")
    assert_failed_run_dir(run_dir)
    assert (run_dir / "notes.txt").read_text() == "mine\n" and not (
        run_dir / "summary.json"
    ).exists()


def test_cli_sweep_with_a_value_of_the_wrong_type_runs_nothing(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *BASE, "engine.block_size=16,abc", f"hydra.sweep.dir={sweep_dir}"]
    proc = harness(args, tmp_path / "unused", timeout=120)
    _assert_one_error_line(proc, "engine.block_size: Value 'abc' of type 'str'")
    assert not sweep_dir.exists()


def test_cli_empty_output_dir_writes_nothing():
    cmd = [sys.executable, "-m", "harness", *BASE, "hydra.run.dir="]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    _assert_one_error_line(
        proc, "hydra.run.dir: an empty path would write into the current directory"
    )
    assert not (ROOT / "harness.log").exists() and not (ROOT / "summary.json").exists()
