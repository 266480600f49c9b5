"""Two smoke suites end to end from the command line (`scripts/run_suite.py` in a child process),
then their report. What the suites compose and sweep: tests/unit/test_suites.py.
"""

from __future__ import annotations

import json

import pandas as pd

from harness.config.schema import register_configs
from tests.cli_util import run_suite

register_configs()  # the schemas Hydra composes against


def test_overhead_smoke_end_to_end_with_report(tmp_path):
    proc = run_suite("overhead_smoke", tmp_path / "sweep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "sweep" / "suite.json").read_text())
    assert (record["num_runs"], record["num_ok"]) == (8, 8)
    runs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if (p / "summary.json").exists())
    assert runs == [
        "0-apc-cacheTrue-seed0",
        "1-apc-cacheFalse-seed0",
        "2-radix-cacheTrue-seed0",
        "3-radix-cacheFalse-seed0",
        "4-apc-cacheFalse-seed1",  # ABBA: the second seed runs its pairs off, then on
        "5-apc-cacheTrue-seed1",
        "6-radix-cacheFalse-seed1",
        "7-radix-cacheTrue-seed1",
    ]
    overhead = pd.read_csv(tmp_path / "sweep" / "overhead.csv")
    tput = overhead[overhead["metric"] == "total_token_throughput"]
    assert sorted(tput["engine"]) == ["apc", "radix"] and set(tput["n_pairs"]) == {2}
    assert (tmp_path / "sweep" / "figures" / "overhead.png").exists()
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert (
        set(summary["arm"]) == {"apc", "apc-off", "radix", "radix-off"}
        and summary["n_not_ok"].sum() == 0
    )


def test_capacity_smoke_end_to_end_with_report(tmp_path):
    proc = run_suite("capacity_smoke", tmp_path / "sweep", report_in_process=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert (
        sorted(summary["kv_capacity_tokens"].unique()) == [64, 256] and summary["n_ok"].sum() == 4
    )
    # 2 groups x 3 prompts, 48-token system prompt: with room for everything both engines reach
    # their ideal; at 64 tokens the second group evicts the first.
    big = summary[summary["kv_capacity_tokens"] == 256]
    assert (
        big["hit_rate"] > summary[summary["kv_capacity_tokens"] == 64]["hit_rate"].max() - 1e-9
    ).all()
    assert (tmp_path / "sweep" / "figures" / "capacity_system_prompt_tiny_real.png").exists()
