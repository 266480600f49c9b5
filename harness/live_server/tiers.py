"""A live server's cached tokens per tier beside the twin's (docs/tiers.md §4).

The server splits each request's cached tokens into device and host (vLLM's local / external,
SGLang's cached_tokens_details); the twin with a host tier predicts both parts. These are the
summary's per-tier figures.
"""

from __future__ import annotations

import pandas as pd

from harness.live_server.twin import TwinResult


def served_host_sum(ok: pd.DataFrame) -> int | None:
    """The host tier's cached tokens the replies reported; None when none split them per tier."""
    split = ok["host_cached_tokens_reported"].astype(bool) & (ok["cached_tokens"] > 0)
    return int(ok.loc[split, "host_cached_tokens"].sum()) if split.any() else None


def tier_comparison(ok: pd.DataFrame, twin: TwinResult) -> dict[str, object]:
    """Predicted against served per tier (docs/tiers.md §4), where the twin has a host tier:
    rows whose cached tokens and their host part the server reported, and how many match in
    both tiers; the predicted and served host tokens over those rows."""
    if twin.predicted_host is None:
        return {}
    pred = ok["predicted_cached_tokens"]
    host = ok["predicted_host_cached_tokens"]
    have = (
        pred.notna()
        & host.notna()
        & ok["cached_tokens_reported"].astype(bool)
        & ok["host_cached_tokens_reported"].astype(bool)
    )
    rows = ok[have]
    served_host = rows["host_cached_tokens"].astype(int)
    served_device = rows["cached_tokens"].astype(int) - served_host
    pred_host = host[have].astype(int)
    pred_device = pred[have].astype(int) - pred_host
    both = (served_host == pred_host) & (served_device == pred_device)
    return {
        "twin_tier_requests": int(have.sum()),
        "twin_tier_matches": int(both.sum()),
        "twin_predicted_host_tokens": int(pred_host.sum()),
        "twin_served_host_tokens": int(served_host.sum()),
        "twin_predicted_device_tokens": int(pred_device.sum()),
        "twin_served_device_tokens": int(served_device.sum()),
    }
