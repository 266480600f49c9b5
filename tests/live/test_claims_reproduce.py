"""Verdicts resting on a quantity measured on this machine reproduce between invocations
(issue 47, item 1): claims 1 (engine-loop CPU time caching adds) and 21 (hash speed), both timed
in fresh processes inside each invocation, run twice as `python -m harness.claims --quick` in
fresh processes give the same labels, with the spread between processes in their intervals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
CPU_MEASURED = ("zero_hit", "hash_algos")


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
    assert "against log(1) = 0.000" in row["evidence"]
    zero_hit = pd.read_csv(tmp_path / "a" / "claims.csv").set_index("number").loc[1]
    assert "10 paired seeds spread over 5 fresh processes" in zero_hit["setup"]
    assert "decode-heavy" in zero_hit["result"] and "prefill-heavy" in zero_hit["result"]
    assert "for this implementation" in zero_hit["threshold"].lower()
