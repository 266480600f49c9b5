"""A live server's cached tokens per tier beside the twin's (docs/tiers.md §4).

The server splits each request's cached tokens into device, host and, with a storage backend,
storage (vLLM's local / external, SGLang's cached_tokens_details); the twin with a host tier
predicts each part. These are the summary's per-tier figures.
"""

from __future__ import annotations

import pandas as pd

from harness.live_server.twin import TwinResult


def served_host_sum(ok: pd.DataFrame) -> int | None:
    """The host tier's cached tokens the replies reported; None when none split them per tier."""
    split = ok["host_cached_tokens_reported"].astype(bool) & (ok["cached_tokens"] > 0)
    return int(ok.loc[split, "host_cached_tokens"].sum()) if split.any() else None


def served_storage_sum(ok: pd.DataFrame) -> int | None:
    """The storage tier's cached tokens the replies reported (SGLang's `storage`); None when no
    reply with cached tokens carried it."""
    split = ok["storage_cached_tokens_reported"].astype(bool) & (ok["cached_tokens"] > 0)
    return int(ok.loc[split, "storage_cached_tokens"].sum()) if split.any() else None


def tier_comparison(ok: pd.DataFrame, twin: TwinResult) -> dict[str, object]:
    """Predicted against served per tier (docs/tiers.md §4.2), where the twin has a host tier:
    rows whose cached tokens and their host part the server reported, and how many match in
    every tier; the predicted and served tokens per tier over those rows.

    Storage is never left unchecked: a twin without a storage tier predicts 0 storage tokens, so
    a row the server served partly from storage does not match. Where the server did not split
    storage out (vLLM's external part is host + storage), its host part is compared with the
    twin's host + storage."""
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
    twin_storage = twin.predicted_storage is not None
    pred_storage = (
        ok.loc[have, "predicted_storage_cached_tokens"].fillna(0).astype(int)
        if twin_storage
        else pd.Series(0, index=rows.index)
    )
    split = rows["storage_cached_tokens_reported"].astype(bool)
    served_storage = rows["storage_cached_tokens"].astype(int).where(split, 0)
    served_host = rows["host_cached_tokens"].astype(int)
    served_device = rows["cached_tokens"].astype(int) - served_host - served_storage
    pred_host = host[have].astype(int)
    pred_device = pred[have].astype(int) - pred_host - pred_storage
    # unsplit: the server's host part is the twin's host + storage, its storage part unknown
    pred_host_cmp = pred_host.where(split, pred_host + pred_storage)
    pred_storage_cmp = pred_storage.where(split, 0)
    both = (
        (served_host == pred_host_cmp)
        & (served_device == pred_device)
        & (served_storage == pred_storage_cmp)
    )
    return {
        "twin_tier_requests": int(have.sum()),
        "twin_tier_matches": int(both.sum()),
        "twin_predicted_host_tokens": int(pred_host.sum()),
        "twin_served_host_tokens": int(served_host.sum()),
        "twin_predicted_device_tokens": int(pred_device.sum()),
        "twin_served_device_tokens": int(served_device.sum()),
        # None: the twin has no storage tier (it predicts none; engine.storage_tier)
        "twin_predicted_storage_tokens": int(pred_storage.sum()) if twin_storage else None,
        "twin_served_storage_tokens": int(served_storage.sum()),
    }
