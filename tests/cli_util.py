"""The command line as a user types it: `python -m harness` and `scripts/run_suite.py` in a child
process. Only tests/live uses these; the fast tiers call `harness.run.execute` in-process
(tests/harness_util.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.harness_util import ROOT


def harness(args: list[str], run_dir: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "harness", *args, f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def run_suite(
    name: str, out: Path, timeout: int = 240, report_in_process: bool = False
) -> subprocess.CompletedProcess:
    """`scripts/run_suite.py name --out out`: the sweep from the command line, then its report.

    `report_in_process`: the script skips its `python -m harness.report` child (--no-report) and
    the same report is built here by harness.report.main, saving an interpreter start."""
    cmd = [sys.executable, "scripts/run_suite.py", name, "--out", str(out)]
    if report_in_process:
        cmd.append("--no-report")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if report_in_process and out.is_dir():
        from harness.report import main as report_main

        assert report_main([str(out)]) == 0
    return proc
