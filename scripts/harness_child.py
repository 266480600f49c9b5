"""Run `python -m harness <overrides>` in a child process and measure it: wall time, CPU time,
the machine's steal time meanwhile, peak RSS, summary.

Shared by scripts/validate_simulator.py and scripts/replay_traces.py, so their runs write the
harness's normal result files. The child reports its own peak RSS (getrusage) on its last stderr line.
"""

from __future__ import annotations

import json
import os
import resource
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
    cpu_s: float  # the child's user + system time: what wall time is on an idle machine
    steal_s: float | None  # CPU time the hypervisor gave other guests meanwhile (Linux)
    peak_rss_mib: float | None
    summary: dict | None
    stderr_tail: str


def steal_seconds() -> float | None:
    """The machine's total steal time so far (all CPUs, /proc/stat), None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hardware_override(name: str) -> str:
    return f"hardware={name}"


def run_harness(
    overrides: list[str],
    timeout_s: float | None = None,
    bound_granularities: list[int] | None = None,
) -> ChildRun:
    env = dict(os.environ)
    if bound_granularities is not None:
        # Token-granular bounds of a whole trace need tens of GB (see harness.config.schema.BoundsConfig).
        gs = ",".join(str(g) for g in bound_granularities)
        overrides = [
            *overrides,
            f"bounds.granularities=[{gs}]",
            "bounds.include_engine_granularity=false",
            "bounds.capped=false",
        ]
    t0, cpu0, steal0 = time.perf_counter(), _children_cpu_s(), steal_seconds()
    proc = subprocess.run(
        [sys.executable, "-c", _BOOT, *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    wall_s, cpu_s, steal1 = time.perf_counter() - t0, _children_cpu_s() - cpu0, steal_seconds()
    steal_s = None if steal0 is None or steal1 is None else steal1 - steal0
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
    return ChildRun(tuple(overrides), proc.returncode, wall_s, cpu_s, steal_s, rss, summary, tail)
