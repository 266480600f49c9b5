"""Sweeps on Hydra launchers: a bad job records its failure and the sweep goes on (docs/benchmarking.md
§13 pitfall 5), on the basic launcher, on submitit_local (the SLURM launcher's local twin) and on
joblib (jobs in joblib's worker processes)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "workload=unique",
    "model=tiny",
    "workload.num_prompts=2",
    "workload.prompt_len=24",
    "workload.output_len=3",
    "warmup.num_requests=1",
    "warmup.prompt_len=16",
    "warmup.output_len=2",
]
# Two jobs: 4096 KV tokens runs; 16 cannot hold one 27-token request (CapacityError, bad input).
ONE_GOOD_ONE_BAD = "engine.kv_capacity_tokens=4096,16"


def multirun(
    args: list[str], sweep_dir: Path, timeout: int = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    cmd = [sys.executable, "-m", "harness", "-m", *TINY, *args, f"hydra.sweep.dir={sweep_dir}"]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def summaries(sweep_dir: Path) -> dict[int, dict]:
    """Job number -> summary.json of every job folder (`<num>-<overrides>`)."""
    out = {}
    for path in sweep_dir.glob("*/summary.json"):
        summary = json.loads(path.read_text())
        out[int(path.parent.name.split("-")[0])] = {**summary, "run_dir": path.parent.name}
    return out


def assert_one_good_one_bad(
    proc: subprocess.CompletedProcess, sweep_dir: Path, codes: tuple[int, ...]
) -> None:
    assert proc.returncode in codes, proc.stderr[-3000:]
    jobs = summaries(sweep_dir)
    assert sorted(jobs) == [0, 1]
    assert jobs[0]["status"] == "ok" and jobs[0]["completed"] == 2
    manifest = json.loads((sweep_dir / jobs[0]["run_dir"] / "manifest.json").read_text())
    assert manifest["config"]["engine"]["kv_capacity_tokens"] == 4096
    assert (
        jobs[1]["status"] == "failed"
        and "KV tokens" in jobs[1]["error"]
        and jobs[1]["completed"] == 0
    )


def test_basic_launcher_keeps_sweep_after_bad_job(tmp_path):
    proc = multirun(["engine=apc", ONE_GOOD_ONE_BAD], tmp_path / "sweep")
    # Every job ran; the sweep exits with the worst job's code (2: bad input), see harness/__main__.py.
    assert_one_good_one_bad(proc, tmp_path / "sweep", codes=(2,))
    assert "error: 1 of 2 jobs did not finish ok" in proc.stderr
    # Ad-hoc job folders are named after their overrides (conf/config.yaml hydra.sweep.subdir).
    names = sorted(job["run_dir"] for job in summaries(tmp_path / "sweep").values())
    assert names[0].startswith("0-engine.kv_capacity_tokens=4096,engine=apc,model=tiny")
    assert names[1].startswith("1-engine.kv_capacity_tokens=16,engine=apc,model=tiny")


def test_job_folder_names_never_nest_or_grow_without_bound():
    from harness.config.run_dirs import MAX_DIR_NAME, dir_name

    assert dir_name("+suite/arm=radix,seed=3") == "+suite_arm=radix,seed=3"
    assert dir_name("a=" + "x" * 500) == ("a=" + "x" * 500)[:MAX_DIR_NAME]
    assert dir_name("") == "job" and "/" not in dir_name("../../x=1")


def test_submitit_local_sweep_of_two_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    proc = multirun(
        [
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=5",
            "engine=radix",
            ONE_GOOD_ONE_BAD,
        ],
        sweep,
        timeout=300,
    )
    # Jobs run in other processes, so the parent cannot see their exit codes: 0, or 2 once it can.
    assert_one_good_one_bad(proc, sweep, codes=(0, 2))
    assert (sweep / ".submitit").is_dir()  # submitit's logs and pickles, one folder per job


def test_joblib_sweep_of_two_jobs(tmp_path):
    # The launchers extra is in the README's setup: missing, this fails rather than skips.
    assert importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher"), "the launchers extra"

    sweep = tmp_path / "sweep"
    proc = multirun(
        ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "engine=apc", ONE_GOOD_ONE_BAD],
        sweep,
        timeout=300,
    )
    # Jobs run in joblib's worker processes, as on submitit_local: 0, or 2 once it can tell.
    assert_one_good_one_bad(proc, sweep, codes=(0, 2))


def test_ray_sweep_of_two_jobs_on_a_local_cluster(tmp_path):
    """The `ray` extra lives in its own environment (hydra-ray-launcher pins cloudpickle<3): this
    runs where it is installed, on a Ray cluster the launcher starts on 127.0.0.1 without a
    dashboard, and the report reads both jobs."""
    pytest.importorskip(
        "hydra_plugins.hydra_ray_launcher",
        reason="needs the ray extra, in its own environment: pip install -e '.[ray]'",
    )
    from harness.report.build import build_report

    sweep = tmp_path / "sweep"
    ray = [
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "+hydra.launcher.ray.init._node_ip_address=127.0.0.1",
    ]
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = multirun([*ray, "engine=apc", ONE_GOOD_ONE_BAD], sweep, timeout=180, env=quiet)
    assert_one_good_one_bad(proc, sweep, codes=(0, 2))
    runs = build_report(sweep, figures=False).runs
    assert sorted(runs["ok"].tolist()) == [False, True]
