"""Issue 48 class 4: `python -m harness.report` leaves no temporary file in figures/, whichever
way it ends: SIGTERM mid-write (removed on the way out), SIGKILL (removed by the next report, which
touches only the files of a writer that is gone), or two reports writing the same folder at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.stale_temps import TEMP_NAME
from tests.report_support import write_results_tree
from tests.serve_process import ROOT, serve_env


def report(results: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.report", str(results), "--out", str(out)],
        cwd=ROOT,
        env={**serve_env(), "MPLBACKEND": "Agg"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def temps(out: Path) -> list[str]:
    return sorted(p.name for p in out.rglob("*.tmp"))


def kill_mid_write(proc: subprocess.Popen, out: Path, sig: int) -> bool:
    """Send `sig` as soon as a temporary figure file exists (or once figures/ does, if no write
    was caught in flight): whether one was caught."""
    figures = out / "figures"
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if figures.is_dir() and any(e.name.endswith(".tmp") for e in os.scandir(figures)):
            proc.send_signal(sig)
            return True
        time.sleep(0.001)
    if proc.poll() is None:
        proc.send_signal(sig)
    return False


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return write_results_tree(tmp_path_factory.mktemp("results"))


def test_sigterm_mid_write_leaves_no_temporary_file(results, tmp_path):
    proc = report(results, tmp_path)
    kill_mid_write(proc, tmp_path, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:  # it had finished before the signal otherwise
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err and "interrupted (SIGTERM)" in err, err
    assert temps(tmp_path) == []


def test_after_sigkill_the_next_report_removes_only_dead_writers_files(results, tmp_path):
    proc = report(results, tmp_path)
    kill_mid_write(proc, tmp_path, signal.SIGKILL)
    proc.wait(30)
    figures = tmp_path / "figures"
    figures.mkdir(exist_ok=True)
    dead = figures / f".x.png.{proc.pid}.abcd1234.tmp"  # the killed writer's name, as it writes
    dead.write_bytes(b"half a figure")
    live = figures / f".y.png.{os.getpid()}.abcd1234.tmp"  # a writer still running (this test)
    live.write_bytes(b"being written")
    assert TEMP_NAME.fullmatch(dead.name) and TEMP_NAME.fullmatch(live.name)
    again = report(results, tmp_path)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert temps(tmp_path) == [live.name]  # the live writer's file is never touched
    assert (figures / "written.txt").is_file()


def test_two_reports_at_once_leave_no_temporary_file(results, tmp_path):
    first, second = report(results, tmp_path), report(results, tmp_path)
    for proc in (first, second):
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    assert temps(tmp_path) == []
    listed = (tmp_path / "figures" / "written.txt").read_text().split()
    assert listed and all((tmp_path / "figures" / name).is_file() for name in listed)
