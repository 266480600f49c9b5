"""Issue 48: scripts/gpu_check.sh and scripts/bench_host.py with bad arguments: one line naming
the argument, exit 2, before anything is made or run (gpu_check.sh made no output folder; a
missing --out value or a file as --out once wrote its stage logs to the file system's root)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHON=sys.executable, **env)
    return subprocess.run(
        ["bash", "scripts/gpu_check.sh", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--out"], {}, "--out needs a folder"),
        (["--wheels"], {}, "--wheels needs a folder"),
        (["--out", ""], {}, "--out needs a folder"),
        (["--bogus"], {}, "unknown argument '--bogus'"),
        ([], {"GPU_CHECK_STAGES": "env,nosuch"}, "unknown stage 'nosuch'"),
        ([], {"GPU_CHECK_STAGES": ","}, "unknown stage ''"),
        ([], {"GPU_CHECK_TOTAL_S": "abc"}, "GPU_CHECK_TOTAL_S must be a whole number"),
        ([], {"GPU_CHECK_TOTAL_S": "-5"}, "GPU_CHECK_TOTAL_S must be a whole number"),
        ([], {"GPU_CHECK_E2E_LIMIT": "0"}, "GPU_CHECK_E2E_LIMIT must be a whole number"),
    ],
)
def test_gpu_check_refuses_bad_input_before_making_anything(tmp_path, args, env, needle):
    out = tmp_path / "check"
    given = args if "--out" in args else [*args, "--out", str(out)]
    done = gpu_check(*given, **env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("gpu_check.sh: ") and needle in lines[0], lines
    assert done.stdout == "" and not out.exists()


def test_gpu_check_refuses_a_file_as_its_output_folder(tmp_path):
    target = tmp_path / "a_file"
    target.write_text("mine")
    done = gpu_check("--dry-run", "--out", str(target))
    assert done.returncode == 2 and "exists and is not a folder" in done.stderr
    assert target.read_text() == "mine"


def test_gpu_check_help_is_the_usage():
    done = gpu_check("--help")
    assert done.returncode == 0 and "--dry-run" in done.stdout and "GPU_CHECK_STAGES" in done.stdout


@pytest.fixture(scope="module")
def bench_host():
    spec = importlib.util.spec_from_file_location("bench_host", ROOT / "scripts" / "bench_host.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batches", "0"], "--batches: 0 is out of range"),
        (["--batches", "16", "-3"], "--batches: -3 is out of range"),
        (["--contexts", "99999999"], "--contexts: 99999999 is out of range"),
        (["--steps", "2"], "--steps must be at least 3"),
        (["--repeats", "0"], "--repeats must be at least 1"),
        (["e2e", "--rounds", "0"], "--rounds must be at least 1"),
        (["e2e", "--root", "/"], "not a prefixbench checkout"),
        (["e2e", "--baseline", "/no/such/tree"], "not a prefixbench checkout"),
        (["--json", "/no/such/folder/rows.json"], "its folder does not exist"),
        (["--batches", "4096", "--contexts", "1000000"], "needs an estimated"),
    ],
)
def test_bench_host_refuses_bad_arguments_before_running(bench_host, capsys, args, needle):
    assert bench_host.main(args) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert out == ""  # no grid point was timed
