"""The micro-benchmark protocol (scripts/bench_pairs.py): interleaved order, paired ratios, case
selection, and a before/after run of bench_radix_tree.py against a checkout (this one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_pairs  # noqa: E402


def test_rounds_alternate_the_order_of_the_arms():
    calls = []

    def arm(name):
        return lambda: calls.append(name) or 1.0

    rounds = bench_pairs.rounds_in_process({"a": arm("a"), "b": arm("b")}, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert rounds == [{"a": 1.0, "b": 1.0}] * 3


def test_ratios_are_paired_within_rounds():
    ratio = bench_pairs.paired([2.0, 9.0, 3.0], [1.0, 3.0, 3.0])
    assert ratio == {"median": 2.0, "min": 1.0, "n": 3}


def test_selection_sets_up_only_the_chosen_cases_and_names_the_valid_ones():
    built = []
    factories = {name: (lambda n=name: built.append(n) or n) for name in ("hash/x", "native/x")}
    assert bench_pairs.select(factories, "hash") == {"hash/x": "hash/x"} and built == ["hash/x"]
    with pytest.raises(SystemExit, match="matches none of: hash/x, native/x"):
        bench_pairs.select(factories, "nope")


def test_before_after_run_prints_a_paired_ratio_per_case():
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "bench_radix_tree.py"),
        "--quick",
        "--rounds",
        "2",
    ]
    cmd += ["--cases", "alloc_free,checkpoint", "--baseline", str(ROOT)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    header, *rows = out.strip().splitlines()
    assert "after/before median" in header and len(rows) == 2
    assert [r.split()[0] for r in rows] == ["alloc_free_2048", "checkpoint_8k_of_127k"]
