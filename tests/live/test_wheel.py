"""The built wheel, installed into a fresh venv, runs from any folder: the packaged configs are
found, and a workload YAML from the user's own folder joins them through hydra.searchpath.

Offline and fast: the venv gets the wheel alone (`--no-deps --no-index`, installed by the test
environment's pip) and reaches the test environment's dependencies through a .pth line (a plain
path line does not run that folder's own .pth files, so an editable install of the repository
there stays invisible).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from engines.cache.apc import pool_loops
from engines.cache.apc.hashing import native_chain_available

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model=tiny", "warmup.num_requests=1", "warmup.prompt_len=16", "warmup.output_len=2"]


def sh(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    # Caches are left out too: tests on the other workers write into them while this copies.
    patterns = shutil.ignore_patterns(
        ".git",
        "build",
        "*.egg-info",
        "__pycache__",
        ".venv",
        ".*_cache",
        ".hypothesis",
        "*.so",  # the in-place builds of the C extensions: the wheel must compile its own
    )

    def skip(folder: str, names: list[str]) -> set[str]:
        # The top-level results/ (run outputs), not the package harness/results.
        top = {"results"} if Path(folder) == ROOT else set()
        return set(patterns(folder, names)) | (top & set(names))

    shutil.copytree(ROOT, tmp / "src", ignore=skip)
    built = sh(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(tmp / "src"),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            "-v",  # setuptools' warnings show only here
        ],
        cwd=tmp,
    )
    # Every folder Python could import is a listed package (setup.py): no ~400 warning lines.
    assert "would be ignored" not in built.stdout + built.stderr
    (wheel,) = (tmp / "dist").glob("prefixbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "harness/conf/config.yaml" in names and "harness/conf/workload/unique.yaml" in names
    # Built here, so the wheel's own build must have them too.
    if native_chain_available():
        assert any(n.startswith("engines/cache/apc/_pickle_chain.") for n in names), names
    if pool_loops.NATIVE is not None:
        assert any(n.startswith("engines/cache/apc/_pool_loops.") for n in names), names
    # A bare venv, installed into by this environment's pip (`--python`): seeding the venv with
    # its own pip (ensurepip) costs seconds and tests nothing about the package.
    sh([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    install = ["install", "--no-deps", "--no-index", "-q", str(wheel)]
    sh([sys.executable, "-m", "pip", "--python", str(python), *install], cwd=tmp, env=clean_env())
    site = sh([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp)
    deps = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "test_deps.pth").write_text(deps + "\n")
    return python


def clean_env() -> dict:
    """The environment without the checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "OMP_NUM_THREADS": "1"}


def harness(python: Path, cwd: Path, args: list[str]) -> dict:
    proc = sh([str(python), "-m", "harness", *args], cwd=cwd, env=clean_env())
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_installed_package_is_not_the_checkout(venv_python, tmp_path):
    out = sh(
        [str(venv_python), "-c", "import harness; print(harness.__file__)"],
        tmp_path,
        env=clean_env(),
    )
    assert "site-packages" in out.stdout and str(ROOT) not in out.stdout


def test_the_default_benchmark_runs_from_another_folder(venv_python, tmp_path):
    summary = harness(venv_python, tmp_path, TINY)
    assert summary["status"] == "ok" and summary["workload"] == "system_prompt"
    assert summary["backend"] == "apc" and summary["completed"] > 0
    assert list((tmp_path / "results").glob("*-system_prompt-apc-seed0/summary.json"))


def test_a_user_workload_yaml_from_its_own_folder(venv_python, tmp_path):
    conf = tmp_path / "my_configs"
    (conf / "workload").mkdir(parents=True)
    (conf / "workload" / "my_unique.yaml").write_text(
        "defaults:\n  - base_unique\n  - _self_\nname: my_unique\nfamily: unique\n"
        "num_prompts: 3\nprompt_len: 24\noutput_len: 2\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = [f"hydra.searchpath=[file://{conf}]", "workload=my_unique", "engine=radix", *TINY]
    summary = harness(venv_python, elsewhere, args)
    assert summary["workload"] == "my_unique" and summary["completed"] == 3
