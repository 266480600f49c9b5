"""Per-request quantities the claims derive from a run's request table (requests.parquet)."""

from __future__ import annotations

import pandas as pd


def reusable_tokens(requests: pd.DataFrame) -> pd.Series:
    """Per request, the tokens an unbounded token-granular cache could reuse: the shared prefix
    (samples after the first of an n > 1 request share their whole prompt), never the last prompt
    token, which is always computed."""
    shared = requests["shared_prefix_len"].where(
        requests["sample_index"] == 0, requests["prompt_tokens"]
    )
    return pd.concat([shared, requests["prompt_tokens"] - 1], axis=1).min(axis=1)
