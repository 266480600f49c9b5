"""Summary fields a newcomer misreads without a label: vLLM's per-second peak concurrency beside the
exact peak of overlapping requests, the virtual clock of simulated runs, and the ideal hit rate at
page 1 beside each engine's own."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.metrics.format import format_summary
from harness.metrics.summarize import peak_overlap
from tests.harness_util import SMALL, merged, run_harness

MULTITURN = ["workload=multiturn", "workload.system_prompt_len=32", "workload.user_history_len=16"]


def vllm_per_second_peak(arrival: np.ndarray, finish: np.ndarray) -> int:
    """vLLM 0.33 `calculate_metrics` (vllm/benchmarks/serve.py), written out: a request counts in
    every whole second from its start's to its end's, both included."""
    start = arrival.min()
    counts: dict[int, int] = {}
    for a, f in zip(arrival, finish):
        for second in range(int(a - start), int(f - start) + 1):
            counts[second] = counts.get(second, 0) + 1
    return max(counts.values())


def exact_overlap(arrival: np.ndarray, finish: np.ndarray) -> int:
    """At each arrival, how many requests are in flight (arrived, not yet finished)."""
    return max(int(((arrival <= a) & (finish > a)).sum()) for a in arrival)


def test_peak_concurrency_on_the_four_user_multiturn_run(tmp_path):
    run = run_harness(merged(SMALL, MULTITURN, ["engine=apc"]), tmp_path / "mt")
    assert run.returncode == 0, run.stderr[-2000:]
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    arrival, finish = table["arrival_s"].to_numpy(), table["finish_s"].to_numpy()
    summary = run.summary
    assert summary["max_concurrent_requests"] == vllm_per_second_peak(arrival, finish)
    assert summary["max_overlapping_requests"] == exact_overlap(arrival, finish)
    # Four users, each turn released when the previous one finishes: never more than 4 at once.
    assert 1 <= summary["max_overlapping_requests"] <= 4
    assert summary["max_overlapping_requests"] <= summary["max_concurrent_requests"]
    printed = format_summary(summary)
    assert "Peak concurrent requests:" in printed
    assert f"Peak overlapping requests (exact):       {summary['max_overlapping_requests']}" in (
        printed
    )


def test_back_to_back_turns_count_twice_per_second_but_never_overlap():
    # Turn 1 of each of 4 users 0.0-0.4 s, turn 2 0.4-0.8 s: vLLM's buckets see 8 in second 0.
    arrival = np.array([0.0] * 4 + [0.4] * 4)
    finish = np.array([0.4] * 4 + [0.8] * 4)
    assert vllm_per_second_peak(arrival, finish) == 8
    assert peak_overlap(arrival, finish) == 4 == exact_overlap(arrival, finish)
    assert peak_overlap(np.array([]), np.array([])) == 0


def test_simulated_runs_say_their_clock_is_virtual(tmp_path):
    sim = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]
    run = run_harness(merged(SMALL, MULTITURN, sim), tmp_path / "sim")
    assert run.returncode == 0, run.stderr[-2000:]
    summary = run.summary
    assert (summary["clock"], summary["hardware"]) == ("virtual", "h100_llama3_8b_bf16")
    printed = format_summary(summary)
    assert "Serving Benchmark Result (virtual clock)" in printed.splitlines()[0]
    assert "Clock:" in printed and "hardware h100_llama3_8b_bf16" in printed
    assert "Benchmark duration (s, virtual):" in printed and "Mean TTFT (ms, virtual):" in printed
    real = run_harness(merged(SMALL, MULTITURN), tmp_path / "real").summary
    assert (real["clock"], real["hardware"]) == ("wall", None)
    assert "virtual" not in format_summary(real)


def test_ideal_hit_rate_at_page_one_is_the_same_for_both_engines(tmp_path):
    apc = run_harness(merged(SMALL, MULTITURN, ["engine=apc"]), tmp_path / "apc").summary
    radix = run_harness(merged(SMALL, MULTITURN, ["engine=radix"]), tmp_path / "radix").summary
    assert math.isclose(apc["ideal_hit_rate_token"], radix["ideal_hit_rate_token"])
    assert apc["ideal_hit_rate_token"] == radix["ideal_hit_rate"]  # radix's own is page 1
    assert apc["ideal_hit_rate"] <= apc["ideal_hit_rate_token"]  # 16-token blocks reuse less
    assert "Ideal hit rate, page 1 (%):" in format_summary(apc)
