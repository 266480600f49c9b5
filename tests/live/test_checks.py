"""The static checks CI runs: `ruff check`, `ruff format --check` and `mypy` as configured in
pyproject.toml (strict on engines/, default elsewhere). Each runs as its own process from the
repository root, so a failure shows the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECKS = {
    "ruff check": [sys.executable, "-m", "ruff", "check", "."],
    "ruff format": [sys.executable, "-m", "ruff", "format", "--check", "."],
    # pyproject's [tool.mypy] names the files; an explicit cache keeps reruns fast
    "mypy": [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
}


@pytest.mark.parametrize("name", list(CHECKS))
def test_static_check_passes(name):
    done = subprocess.run(CHECKS[name], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
