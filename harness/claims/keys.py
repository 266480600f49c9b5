"""The summary keys the claims read, in one place: a renamed summary key is a one-line change."""

from __future__ import annotations

from collections.abc import Mapping

HIT_RATE = "hit_rate"  # cached prompt tokens / prompt tokens, per request at first admission
IDEAL_HIT_RATE = "ideal_hit_rate"  # unbounded-cache ceiling at the engine's own granularity
THROUGHPUT = "total_token_throughput"  # (input + output tokens) / duration
OUTPUT_THROUGHPUT = "output_throughput"
TTFT_MEAN = "mean_ttft_ms"
TTFT_P50 = "median_ttft_ms"
TTFT_P99 = "p99_ttft_ms"
BOOKKEEPING_MS = "cache_bookkeeping_ms"
PREEMPTIONS = "num_preemptions"
EVICTIONS = "evictions"


def value(summary: Mapping[str, object], key: str) -> float:
    """A numeric summary field; a missing or null one is a bug in the run, not a zero."""
    found = summary.get(key)
    if not isinstance(found, (int, float)) or isinstance(found, bool):
        raise KeyError(f"summary field {key!r} is {found!r}, expected a number")
    return float(found)
