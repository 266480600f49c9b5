"""Metric definitions (docs/benchmarking.md §5.1, §8; docs/apc.md §13.3) on hand-made records with known numbers.

Times are binary fractions so every expected value below is exact arithmetic done by hand.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.metrics.format import format_summary
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.table import itls_ms, request_table, token_rows
from harness.results.columns import COLUMNS, TIMING_COLUMNS
from harness.results.json_safe import json_safe
from tests.metrics_util import CTX, RECORDS, REQUESTS, record
from workloads.request import Request


@pytest.fixture
def table() -> pd.DataFrame:
    return request_table(RECORDS[::-1], REQUESTS, CTX)


def test_table_columns_dtypes_and_per_request_times(table):
    assert list(table.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in table.dtypes.items()} == {c: str(t) for c, t in COLUMNS.items()}
    assert table["request_id"].tolist() == ["a", "b", "c"]
    assert table["ttft_ms"].tolist() == [250.0, 250.0, 500.0]
    assert table["e2el_ms"].tolist() == [1000.0, 250.0, 625.0]
    assert table["queue_delay_ms"].tolist() == [125.0, 0.0, 250.0]
    assert table.loc[0, "tpot_ms"] == 250.0 and table.loc[2, "tpot_ms"] == 125.0
    assert math.isnan(table.loc[1, "tpot_ms"])  # TPOT is undefined for a single output token
    assert table["session_id"].isna().tolist() == [False, True, False]
    assert table.loc[0, "salt"] == "tenant" and table.loc[1, "shared_prefix_len"] == 7
    assert (table["engine"] == "apc").all() and (table["run_id"] == "run-0").all()


def test_table_order_is_the_workloads_and_stable_across_runs():
    reqs = {
        "r2": Request("r2", (1, 2, 3), arrival_s=0.5),
        "r10": Request("r10", (4, 5), arrival_s=0.0),
        "p": Request("p", (6, 7), arrival_s=0.5, n=2),
    }

    def run(jitter_s):  # the same run again, with different wall-clock times
        return [
            record("1_p", [0.75 + jitter_s], 0.5, 0.5, prompt=2, cached=2, parent="p", sample=1),
            record("0_p", [0.7 + jitter_s], 0.5, 0.5, prompt=2, cached=0, parent="p", sample=0),
            record(
                "r2", [2.0 + jitter_s], 1.5 + jitter_s, 1.5, prompt=3, cached=0
            ),  # released late
            record("r10", [0.1 + jitter_s], 0.0, 0.0, prompt=2, cached=0),
        ]

    first = request_table(run(0.0), reqs, CTX)
    # scheduled arrival, then generator order (not "r10" < "r2"), then sample index
    assert first["request_id"].tolist() == ["r10", "r2", "0_p", "1_p"]
    assert first["request_index"].tolist() == [1, 0, 2, 2]
    second = request_table(run(0.03125), reqs, CTX)
    assert not first.equals(second)
    pd.testing.assert_frame_equal(
        first.drop(columns=list(TIMING_COLUMNS)), second.drop(columns=list(TIMING_COLUMNS))
    )


def test_empty_table_keeps_schema():
    empty = request_table([], REQUESTS, CTX)
    assert empty.empty and list(empty.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in empty.dtypes.items()} == {c: str(t) for c, t in COLUMNS.items()}


def test_itls_are_gaps_between_consecutive_tokens():
    itls = {rid: tuple(gaps) for rid, gaps in itls_ms(RECORDS).items()}
    assert itls == {"a": (125.0, 250.0, 375.0), "b": (), "c": (125.0,)}


def test_summary_vllm_fields(table):
    s = summary_dict(summarize(table, itls_ms(RECORDS), 2.0, {}))
    assert (s["completed"], s["failed"], s["duration"]) == (3, 0, 2.0)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (180, 7)
    assert s["request_throughput"] == 1.5
    assert s["output_throughput"] == 3.5
    assert s["total_token_throughput"] == 93.5
    # TTFT [250, 250, 500]: linear interpolation between order statistics
    assert s["mean_ttft_ms"] == pytest.approx(1000 / 3)
    assert s["median_ttft_ms"] == s["p50_ttft_ms"] == 250.0
    assert s["std_ttft_ms"] == pytest.approx(
        math.sqrt((2 * (250 - 1000 / 3) ** 2 + (500 - 1000 / 3) ** 2) / 3)
    )
    assert s["p90_ttft_ms"] == pytest.approx(250 + 0.8 * 250)
    assert s["p99_ttft_ms"] == pytest.approx(250 + 0.98 * 250)
    # TPOT only over requests with more than one output token: [250, 125]
    assert s["mean_tpot_ms"] == 187.5
    assert s["p99_tpot_ms"] == pytest.approx(125 + 0.99 * 125)
    # ITLs pooled over requests: [125, 125, 250, 375]
    assert s["mean_itl_ms"] == 218.75 and s["median_itl_ms"] == 187.5
    assert s["std_itl_ms"] == pytest.approx(math.sqrt((2 * 93.75**2 + 31.25**2 + 156.25**2) / 4))
    assert s["p90_itl_ms"] == pytest.approx(250 + 0.7 * 125)
    assert s["p99_itl_ms"] == pytest.approx(250 + 0.97 * 125)
    # E2EL [1000, 250, 625]
    assert s["mean_e2el_ms"] == 625.0 and s["median_e2el_ms"] == 625.0
    assert s["p99_e2el_ms"] == pytest.approx(625 + 0.98 * 375)
    # peaks over 1 s buckets: tokens at .25 .375 .625 .75 | 1.0 1.5 1.625; active a,b | a,c
    assert s["max_output_tokens_per_s"] == 4.0 and s["max_concurrent_requests"] == 2


def test_summary_sglang_fields(table):
    s = summary_dict(summarize(table, itls_ms(RECORDS), 2.0, {}))
    assert s["input_throughput"] == 90.0 and s["total_throughput"] == 93.5
    assert s["concurrency"] == pytest.approx((1.0 + 0.25 + 0.625) / 2.0)  # Σ E2EL / duration
    assert s["p95_itl_ms"] == pytest.approx(250 + 0.85 * 125)
    assert s["max_itl_ms"] == 375.0
    for stat in ("mean", "median", "std", "p90", "p99"):
        assert s[f"{stat}_e2e_latency_ms"] == s[f"{stat}_e2el_ms"]


def test_summary_hit_rate_and_cache_fields(table):
    extra = {
        "ideal_hit_rate": 0.5,
        "evictions": 3,
        "status": "ok",
    }
    s = summary_dict(summarize(table, itls_ms(RECORDS), 2.0, extra))
    assert s["prompt_tokens_cached"] == 80
    assert s["hit_rate"] == pytest.approx(80 / 180)
    assert "hit_rate_tokens" not in s and "hit_rate_source" not in s  # one quantity, one name
    assert (s["recomputed_tokens"], s["num_preemptions"]) == (5, 1)
    assert (s["ideal_hit_rate"], s["evictions"], s["status"]) == (0.5, 3, "ok")
    # the measured window is whatever rows are passed: here only b and c
    window = summary_dict(summarize(table.iloc[1:], itls_ms(RECORDS), 1.0, {}))
    assert window["hit_rate"] == pytest.approx(16 / 80) and window["completed"] == 2
    assert window["mean_itl_ms"] == 125.0  # a's ITLs are left out with a


def test_summary_extra_wins_and_context_fields(table):
    s = summary_dict(
        summarize(
            table, itls_ms(RECORDS), 2.0, {"completed": 99, "label": "x"}, context=CTX, num_failed=2
        )
    )
    assert s["completed"] == 99 and s["label"] == "x" and s["failed"] == 2
    assert (s["engine"], s["backend"], s["run_id"], s["seed"]) == ("apc", "apc", "run-0", 0)


def test_summary_accepts_pooled_itls(table):
    by_request = summary_dict(summarize(table, itls_ms(RECORDS), 2.0, {}))
    pooled = summary_dict(summarize(table, [125.0, 250.0, 375.0, 125.0], 2.0, {}))
    for key in ("mean_itl_ms", "p95_itl_ms", "p99_itl_ms", "max_itl_ms", "std_itl_ms"):
        assert pooled[key] == by_request[key]
    assert pooled["max_output_tokens_per_s"] is None  # needs each request's token times


def _plain(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (bool, int, float, str)


def test_summary_is_json_safe_even_when_empty():
    empty = request_table([], REQUESTS, CTX)
    s = summary_dict(
        summarize(
            empty,
            {},
            0.0,
            {
                "belady_hit_rate": np.float64("nan"),
                "evictions": np.int64(2),
                "request_rate": math.inf,
            },
        )
    )
    assert _plain(s)
    json.dumps(s, allow_nan=False)
    assert s["completed"] == 0 and s["hit_rate"] is None and s["request_throughput"] is None
    assert s["mean_ttft_ms"] == 0.0 and s["p99_itl_ms"] == 0.0  # an empty list counts as 0
    assert (s["belady_hit_rate"], s["evictions"], s["request_rate"]) == (None, 2, "inf")


def test_single_token_requests_give_zero_tpot_stats():
    only_b = request_table(RECORDS[1:2], REQUESTS, CTX)
    s = summary_dict(summarize(only_b, itls_ms(RECORDS), 1.0, {}))
    assert s["mean_tpot_ms"] == 0.0 and s["p99_tpot_ms"] == 0.0 and s["max_itl_ms"] == 0.0
    assert _plain(s)


def test_json_safe_recurses():
    value = {"a": [np.float32(0.5), float("nan")], "b": (np.int64(3), -math.inf), "c": pd.NA}
    assert json_safe(value) == {"a": [0.5, None], "b": [3, "-inf"], "c": None}


def test_format_summary_block(table):
    s = summary_dict(
        summarize(table, itls_ms(RECORDS), 2.0, {"evictions": 3, "cache_bookkeeping_ms": 1.5})
    )
    text = format_summary(s)
    lines = text.splitlines()
    assert lines[0] == "=" * 12 + " Serving Benchmark Result " + "=" * 12
    assert lines[-1] == "=" * 50
    assert "Successful requests:                     3" in lines
    assert "Benchmark duration (s):                  2.00" in lines
    assert "Total Token throughput (tok/s):          93.50" in lines
    assert "Mean TTFT (ms):                          333.33" in lines
    assert "P99 ITL (ms):                            371.25" in lines
    assert "Prefix cache hit rate (%):               44.44" in lines
    assert "Ideal hit rate (%):                      n/a" in lines
    assert "Evictions:                               3" in lines
    assert "Preemptions:                             1" in lines


def test_token_rows_follow_table_order(table):
    children = [
        record("1_p", [0.5], 0.0, 0.0, prompt=2, cached=0, parent="p", sample=1),
        record("0_p", [0.5], 0.0, 0.0, prompt=2, cached=0, parent="p", sample=0),
    ]
    reqs = {"p": Request("p", (6, 7), n=2)}
    df = request_table(children, reqs, CTX)
    rows = token_rows(df, children, reqs)
    assert [r["request_id"] for r in rows] == ["0_p", "1_p"]
    assert rows[1] == {"request_id": "1_p", "prompt_ids": [6, 7], "output_ids": [0]}
