"""scripts/fleet_twin_scores.py with bad arguments: one line naming the argument, exit 2, before
any worker starts or any folder is made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--cases", "sglang:kv_aware"], "--cases 'sglang:kv_aware' is not a router:policy"),
        (["--cases", "nope"], "valid: sglang:round_robin"),
        (["--cases", "sglang:kv_aware+load"], "valid: sglang:round_robin"),
        (["--workers", "9"], "--workers must be integers in [2, 8]"),
        (["--workers", "1"], "--workers must be integers in [2, 8]"),
        (["--concurrency", "0"], "--concurrency must be integers in [1, 16]"),
        (["--starts", "0"], "--starts must be an integer in [1, 10]"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2_with_nothing_made(tmp_path, args, needle):
    out = tmp_path / "scores"
    done = subprocess.run(
        [sys.executable, "scripts/fleet_twin_scores.py", *args, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()
