"""The factorial_smoke suite end to end from the command line (`scripts/run_suite.py` in a child
process) to decomposition.csv and its figure; the decomposition's arithmetic is
tests/unit/test_decomposition.py."""

from __future__ import annotations

import json

import pandas as pd

from tests.cli_util import run_suite


def test_factorial_smoke_end_to_end_draws_the_decomposition(tmp_path):
    proc = run_suite("factorial_smoke", tmp_path / "sweep", timeout=600, report_in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "sweep" / "suite.json").read_text())
    assert (record["num_runs"], record["num_ok"]) == (12, 12)
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert set(summary["arm"]) == {
        "apc",
        "apc-sglang",
        "radix",
        "radix-vllm",
        "radix-overlap",
        "apc-sglang-overlap",
    }
    table = pd.read_csv(tmp_path / "sweep" / "decomposition.csv")
    assert set(table["workload"]) == {"fewshot", "parallel"}
    assert table["overlap_effect_under_radix"].notna().all()
    assert table["overlap_effect_under_apc"].notna().all()
    assert set(table["driver"]) <= {"data structure", "scheduler", "interaction", "none"}
    assert (tmp_path / "sweep" / "figures" / "decomposition_tiny_real.png").exists()
    (cross,) = (tmp_path / "sweep").glob("*-fewshot-apc_sglang-seed0")
    profile = json.loads((cross / "summary.json").read_text())["policy_profile"]
    assert (profile["cache"], profile["scheduler"]) == ("apc", "sglang")
    assert "hash_algo" in profile and "max_prefill_tokens" in profile
    assert "eviction_policy" not in profile and "async_scheduling" not in profile
