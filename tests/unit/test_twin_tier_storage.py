"""The server target's per-tier comparison with a storage tier (harness/live_server/tiers.py,
docs/tiers.md §4.2): a twin without a storage tier predicts none, so a request the server served
partly from storage never counts as a match; a twin with one is compared on all three tiers, or,
where the server reported vLLM's external part only, on host + storage together."""

from __future__ import annotations

import pandas as pd

from harness.live_server.tiers import served_storage_sum, tier_comparison
from harness.live_server.twin import TwinResult

# one request: 276 cached of 300, served 16 device + 100 host + 160 storage


def _rows(storage_reported: bool, predicted_storage: int | None) -> pd.DataFrame:
    return pd.DataFrame({
        "request_id": ["r0"],
        "cached_tokens": [276],
        "host_cached_tokens": [100 if storage_reported else 260],  # vLLM: external = both
        "storage_cached_tokens": [160 if storage_reported else 0],
        "cached_tokens_reported": [True],
        "host_cached_tokens_reported": [True],
        "storage_cached_tokens_reported": [storage_reported],
        "predicted_cached_tokens": pd.array([276], dtype="Int64"),
        "predicted_host_cached_tokens": pd.array([100], dtype="Int64"),
        "predicted_storage_cached_tokens": pd.array([predicted_storage], dtype="Int64"),
    })  # fmt: skip


def _twin(storage: int | None) -> TwinResult:
    return TwinResult(
        predicted={"r0": 276},
        one_at_a_time=True,
        evictions=0,
        engine={},
        bounds={},
        predicted_host={"r0": 100},
        predicted_storage=None if storage is None else {"r0": storage},
    )


def test_a_twin_without_storage_does_not_match_a_storage_hit():
    # same cached and host tokens: without the storage check this row would pass as a match
    got = tier_comparison(_rows(True, None), _twin(None))
    assert (got["twin_tier_requests"], got["twin_tier_matches"]) == (1, 0)
    assert got["twin_predicted_storage_tokens"] is None
    assert (got["twin_served_storage_tokens"], got["twin_served_device_tokens"]) == (160, 16)
    assert got["twin_predicted_device_tokens"] == 176


def test_a_twin_with_storage_matches_each_tier():
    got = tier_comparison(_rows(True, 160), _twin(160))
    assert (got["twin_tier_requests"], got["twin_tier_matches"]) == (1, 1)
    assert (got["twin_predicted_storage_tokens"], got["twin_served_storage_tokens"]) == (160, 160)
    assert served_storage_sum(_rows(True, 160)) == 160
    wrong = tier_comparison(_rows(True, 150), _twin(150))  # 10 tokens moved to the device
    assert wrong["twin_tier_matches"] == 0


def test_vllm_external_part_is_compared_with_host_plus_storage():
    got = tier_comparison(_rows(False, 160), _twin(160))
    assert (got["twin_tier_requests"], got["twin_tier_matches"]) == (1, 1)
    assert served_storage_sum(_rows(False, 160)) is None  # nothing said about storage
