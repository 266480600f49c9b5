"""The intended layout: one config tree at the top (conf/), found by a checkout, an editable
install and the wheel alike (tests/test_wheel.py runs the wheel from another folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.config import CONF_DIR

ROOT = Path(__file__).resolve().parents[1]


def test_the_checkout_reads_the_top_level_conf():
    assert CONF_DIR == ROOT / "conf"
    assert not (ROOT / "harness" / "conf").exists()  # one source: the wheel maps conf/ in


def test_the_editable_install_reads_it_from_any_folder(tmp_path):
    """scripts/setup.sh installs the checkout in editable mode; from another folder the installed
    harness still finds the checkout's conf/."""
    code = "import harness.config as c; print(c.CONF_DIR)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == ROOT / "conf"
