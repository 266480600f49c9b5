"""Verdicts resting on a quantity measured on this machine reproduce between invocations
(issue 47, item 1): claim 21 (hash speed, process time, timed in fresh processes inside each
invocation) run twice as `python -m harness.claims --quick` in fresh processes gives the same
label, with the spread between processes in its deciding interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
CPU_MEASURED = ("hash_algos",)


def _labels(out: Path) -> dict[int, str]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.claims",
            "--quick",
            "--out",
            str(out),
            "--only",
            *CPU_MEASURED,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    table = pd.read_csv(out / "claims.csv")
    return dict(zip(table["number"], table["verdict"].str.split(":").str[0]))


def test_cpu_measured_claims_give_the_same_label_twice(tmp_path):
    first, second = _labels(tmp_path / "a"), _labels(tmp_path / "b")
    assert first == second
    row = pd.read_csv(tmp_path / "a" / "claims.csv").set_index("number").loc[21]
    assert "fresh processes" in row["result"] and "fresh processes" in row["setup"]
    assert "identical request by request: yes" in row["result"]
    assert "against log(1.2)" in row["evidence"]
