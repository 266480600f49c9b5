"""Run `python -m harness <overrides>` in a child process and measure it: wall time, peak RSS, summary.

Shared by scripts/validate_simulator.py and scripts/replay_traces.py, so their runs write the
harness's normal result files. The child reports its own peak RSS (getrusage) on its last stderr line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RSS_TAG = "peak_rss_mib="

_BOOT = f"""
import os, resource, runpy, sys
sys.path.insert(0, {str(ROOT)!r})
sys.argv = ["harness", *sys.argv[1:]]
try:
    runpy.run_module("harness", run_name="__main__", alter_sys=True)
finally:
    print("{RSS_TAG}%.1f" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), file=sys.stderr)
"""


@dataclass(frozen=True)
class ChildRun:
    overrides: tuple[str, ...]
    returncode: int
    wall_s: float
    peak_rss_mib: float | None
    summary: dict | None
    stderr_tail: str


def hardware_override(name: str) -> str:
    return f"hardware={name}"


def run_harness(
    overrides: list[str],
    timeout_s: float | None = None,
    bound_granularities: list[int] | None = None,
) -> ChildRun:
    env = dict(os.environ)
    if bound_granularities is not None:
        # Token-granular bounds of a whole trace need tens of GB (see harness.config.BoundsConfig).
        gs = ",".join(str(g) for g in bound_granularities)
        overrides = [
            *overrides,
            f"bounds.granularities=[{gs}]",
            "bounds.include_engine_granularity=false",
            "bounds.capped=false",
        ]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _BOOT, *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    wall_s = time.perf_counter() - t0
    rss = None
    for line in reversed(proc.stderr.splitlines()):
        if line.startswith(RSS_TAG):
            rss = float(line[len(RSS_TAG) :])
            break
    summary = None  # the last stdout line is summary.json, also for status "failed" (exit 1)
    lines = proc.stdout.strip().splitlines()
    if lines and lines[-1].startswith("{"):
        summary = json.loads(lines[-1])
    tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
    return ChildRun(tuple(overrides), proc.returncode, wall_s, rss, summary, tail)
