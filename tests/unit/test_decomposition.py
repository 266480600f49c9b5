"""The scheduler x cache decomposition: effects from a 2x2 square, and the factorial_smoke suite
end to end from the CLI to decomposition.csv and its figure."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.report.decomposition import decomposition_table

GRANULARITY = {"apc": 16, "radix": 1}


def tidy(cells: dict[tuple[str, str], float], workload: str = "w", seeds: int = 2) -> pd.DataFrame:
    """Tidy runs of one workload with `hit_rate` per (cache, scheduler); other metrics fixed."""
    rows = []
    for (cache, scheduler), hit in cells.items():
        for seed in range(seeds):
            rows.append(
                dict(
                    workload=workload,
                    engine=cache,
                    scheduler=scheduler,
                    ok=True,
                    cache_enabled=True,
                    policy="fcfs",
                    granularity=GRANULARITY[cache],
                    model="tiny",
                    executor="real",
                    kv_capacity_tokens=4096,
                    seed=seed,
                    hit_rate=hit,
                    median_ttft_ms=10.0 + seed,
                    p99_ttft_ms=20.0,
                    total_token_throughput=1000.0,
                )
            )
    return pd.DataFrame(rows)


def hit_row(cells) -> pd.Series:
    table = decomposition_table(tidy(cells))
    return table[table["metric"] == "hit_rate"].iloc[0]


def test_a_pure_data_structure_effect():
    row = hit_row(
        {
            ("apc", "vllm"): 0.5,
            ("radix", "vllm"): 0.7,
            ("apc", "sglang"): 0.5,
            ("radix", "sglang"): 0.7,
        }
    )
    assert row["data_structure_effect_under_vllm"] == pytest.approx(0.2)
    assert row["data_structure_effect_under_sglang"] == pytest.approx(0.2)
    assert row["scheduler_effect_under_apc"] == row["scheduler_effect_under_radix"] == 0
    assert row["shipped_difference"] == pytest.approx(0.2) and row["driver"] == "data structure"


def test_a_pure_scheduler_effect():
    row = hit_row(
        {
            ("apc", "vllm"): 0.6,
            ("radix", "vllm"): 0.6,
            ("apc", "sglang"): 0.1,
            ("radix", "sglang"): 0.1,
        }
    )
    assert row["scheduler_main_effect"] == pytest.approx(-0.5) and row["interaction"] == 0
    assert row["driver"] == "scheduler"


def test_one_pairing_alone_is_an_interaction():
    # The fewshot-burst shape: only APC under vLLM's scheduler reuses within a step.
    row = hit_row(
        {
            ("apc", "vllm"): 0.73,
            ("radix", "vllm"): 0.11,
            ("apc", "sglang"): 0.11,
            ("radix", "sglang"): 0.11,
        }
    )
    assert row["shipped_difference"] == pytest.approx(-0.62)
    assert row["interaction"] == pytest.approx(0.31) and row["driver"] == "interaction"


def test_means_over_seeds_and_incomplete_squares_are_left_out():
    cells = {
        ("apc", "vllm"): 0.5,
        ("radix", "vllm"): 0.7,
        ("apc", "sglang"): 0.5,
        ("radix", "sglang"): 0.7,
    }
    runs = pd.concat(
        [tidy(cells), tidy({("apc", "vllm"): 0.1, ("radix", "sglang"): 0.2}, workload="half")]
    )
    table = decomposition_table(runs)
    assert set(table["workload"]) == {"w"}
    ttft = table[table["metric"] == "median_ttft_ms"].iloc[0]
    assert ttft["apc+vllm"] == pytest.approx(10.5) and ttft["n_runs_per_arm"] == 2


def test_cache_off_or_other_policies_are_not_part_of_the_square():
    cells = {
        ("apc", "vllm"): 0.5,
        ("radix", "vllm"): 0.7,
        ("apc", "sglang"): 0.5,
        ("radix", "sglang"): 0.7,
    }
    runs = tidy(cells)
    runs.loc[runs["engine"] == "apc", "policy"] = "lpm"
    assert decomposition_table(runs).empty


def test_overlap_is_a_third_scheduler_level_beside_the_square():
    """Runs of SGLang's overlap loop are no cell of the 2x2; the row gives their effect per cache."""
    square = {
        ("apc", "vllm"): 0.5,
        ("radix", "vllm"): 0.5,
        ("apc", "sglang"): 0.5,
        ("radix", "sglang"): 0.5,
    }
    row = hit_row({**square, ("radix", "sglang-overlap"): 0.3})
    assert row["scheduler_main_effect"] == 0 and row["radix+sglang"] == pytest.approx(0.5)
    assert row["overlap_effect_under_radix"] == pytest.approx(-0.2)
    assert pd.isna(row["overlap_effect_under_apc"])
