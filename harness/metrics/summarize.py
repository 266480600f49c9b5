"""The run summary of a measured window: `vllm bench serve` / SGLang `bench_serving` definitions.

Definitions: docs/benchmarking.md §5.1 (measured hit rate) and §8, docs/apc.md §13.2-13.4.
`summarize` aggregates the request table (harness.metrics.table) into a `RunSummary`
(harness.metrics.summary); `summary_dict` is the object summary.json holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from harness.metrics.config import MetricsConfig, parse_slos
from harness.metrics.summary import (
    CacheFigures,
    LatencyStats,
    RunContext,
    RunSummary,
    SglangRates,
    Throughput,
)
from harness.results.json_safe import json_safe


def summarize(
    df: pd.DataFrame,
    itls_ms: Mapping[str, Sequence[float] | np.ndarray] | Sequence[float],
    duration_s: float,
    extra: Mapping[str, object] | None = None,
    *,
    context: RunContext | None = None,
    num_failed: int = 0,
    metrics: MetricsConfig | None = None,
) -> RunSummary:
    """Aggregate the measured window's request table into the run's summary record.

    `df` holds the successful requests of the measured window. `itls_ms` is either `itls_ms(records)`
    (request_id -> ITLs; ids missing from `df` are ignored) or an already pooled list of ITLs, which
    gives the same statistics but no `max_output_tokens_per_s` (None): that peak needs each
    request's token times. `context` fields, when given, come first in `as_dict()`; `extra`
    (ideal_hit_rate, evictions, status, ...) is merged last and wins. `metrics` picks the
    percentiles and the goodput SLOs (defaults: MetricsConfig()). `summary_dict` gives the
    JSON-safe object summary.json holds.
    """
    metrics = metrics or MetricsConfig()
    percentiles = tuple(metrics.percentiles)
    ids = list(df["request_id"])
    itl_lists = (
        [np.asarray(itls_ms.get(rid, ()), dtype=float) for rid in ids]
        if isinstance(itls_ms, Mapping)
        else None
    )
    # Both upstreams pool the ITLs of all requests for their statistics.
    pooled_itl = (
        np.concatenate([np.empty(0), *itl_lists])
        if itl_lists is not None
        else np.asarray(list(itls_ms), dtype=float)
    )
    num_in = int(df["prompt_tokens"].sum())
    num_out = int(df["output_tokens"].sum())
    num_cached = int(df["cached_tokens"].sum())
    num_host = int(df["host_cached_tokens"].sum()) if "host_cached_tokens" in df else 0
    num_storage = int(df["storage_cached_tokens"].sum()) if "storage_cached_tokens" in df else 0
    e2el = df["e2el_ms"].tolist()
    peak_tokens, peak_requests = _peaks(df, itl_lists)
    overlapping = peak_overlap(df["arrival_s"].to_numpy(), df["finish_s"].to_numpy())
    throughput = Throughput(
        duration=duration_s,
        completed=len(ids),
        failed=num_failed,
        total_input_tokens=num_in,
        total_output_tokens=num_out,
        request_throughput=_rate(len(ids), duration_s),
        request_goodput=_goodput(df, parse_slos(metrics.goodput), duration_s),
        output_throughput=_rate(num_out, duration_s),
        total_token_throughput=_rate(num_in + num_out, duration_s),
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_requests,
        max_overlapping_requests=overlapping,
    )
    latencies = (
        _stats("ttft_ms", df["ttft_ms"].tolist(), percentiles),
        _stats("tpot_ms", df["tpot_ms"].dropna().tolist(), percentiles),
        _stats("itl_ms", pooled_itl, (*percentiles, 95)),
        _stats("e2el_ms", e2el, percentiles),
        _stats("queue_delay_ms", df["queue_delay_ms"].tolist(), percentiles),
    )
    sglang = SglangRates(  # SGLang bench_serving names for the same quantities
        input_throughput=_rate(num_in, duration_s),
        total_throughput=_rate(num_in + num_out, duration_s),
        concurrency=_rate(sum(e2el) / 1e3, duration_s),
    )
    # Measured hit rate (docs/benchmarking.md §5.1): first-admission reuse over client-side prompts.
    cache = CacheFigures(
        prompt_tokens_cached=num_cached,
        hit_rate=num_cached / num_in if num_in else None,
        recomputed_tokens=int(df["recomputed_tokens"].sum()),
        num_preemptions=int(df["num_preemptions"].sum()),
        prompt_tokens_cached_host=num_host,
        device_hit_rate=(num_cached - num_host - num_storage) / num_in if num_in else None,
        host_hit_rate=num_host / num_in if num_in else None,
        prompt_tokens_cached_storage=num_storage,
        storage_hit_rate=num_storage / num_in if num_in else None,
    )
    max_itl_ms = float(pooled_itl.max()) if len(pooled_itl) else 0.0
    return RunSummary(throughput, latencies, max_itl_ms, sglang, cache, context, dict(extra or {}))


def summary_dict(summary: RunSummary) -> dict:
    """The JSON-safe flat object of summary.json: NaN becomes None, +-inf "inf"/"-inf" (vLLM
    writes request_rate=inf that way)."""
    out = json_safe(summary.as_dict())
    assert isinstance(out, dict)
    return out


def _rate(amount: float, duration_s: float) -> float | None:
    return amount / duration_s if duration_s > 0 else None


def _stats(
    name: str, values: Sequence[float] | np.ndarray, percentiles: Sequence[float]
) -> LatencyStats:
    """mean/median/population std/percentiles (linear interpolation); an empty list counts as 0."""
    arr = np.asarray(values, dtype=float) if len(values) else np.zeros(1)
    ps = sorted(set(percentiles))  # one partition for all: each value is as if computed alone
    values_at = np.percentile(arr, ps) if ps else ()
    pairs = tuple((float(p), float(v)) for p, v in zip(ps, values_at))
    return LatencyStats(name, float(arr.mean()), float(np.median(arr)), float(arr.std()), pairs)


def _goodput(df: pd.DataFrame, slos: Mapping[str, float], duration_s: float) -> float | None:
    """Requests meeting every SLO, per second; a 1-token request's TPOT counts as 0 (vLLM)."""
    if not slos:
        return None
    good = np.ones(len(df), dtype=bool)
    for key, limit_ms in slos.items():
        values = df[f"{key}_ms"].fillna(0.0) if key == "tpot" else df[f"{key}_ms"]
        good &= values.to_numpy(dtype=float) <= limit_ms
    return _rate(int(good.sum()), duration_s)


def peak_overlap(arrival_s: np.ndarray, finish_s: np.ndarray) -> int:
    """The most requests in flight at one instant: each is in flight from its arrival to its
    finish, and one that finishes at the instant another arrives does not overlap it."""
    if not len(arrival_s):
        return 0
    times = np.concatenate([finish_s, arrival_s])
    steps = np.concatenate([-np.ones(len(finish_s), int), np.ones(len(arrival_s), int)])
    order = np.lexsort((steps, times))  # at equal times, finishes (-1) before arrivals (+1)
    return int(np.cumsum(steps[order]).max())


def _peaks(df: pd.DataFrame, itl_lists: list[np.ndarray] | None) -> tuple[float | None, int]:
    """Peak output tokens and active requests over 1-second buckets from the first arrival.

    vLLM's definition (`calculate_metrics` in vllm/benchmarks/serve.py, vLLM 0.33): token times are
    reconstructed as first_token + cumulative ITLs, and a request counts as active in every
    1-second bucket from its arrival's to its finish's, both included, so two back-to-back turns
    of one conversation that meet inside a second both count: `max_concurrent_requests` can
    exceed what ever overlapped (`peak_overlap`, printed beside it). Only buckets where
    something happens are counted (sorted events, not one array slot per second), so the memory
    is bounded by the requests and tokens whatever the (simulated) clock spans; a non-finite time
    gives no peak rather than a crash.
    """
    if df.empty:
        return 0.0, 0
    arrival = df["arrival_s"].to_numpy(dtype=float)
    finish = df["finish_s"].to_numpy(dtype=float)
    if not (np.isfinite(arrival).all() and np.isfinite(finish).all()):
        return None, 0
    start_s = float(arrival.min())
    # +1 at a request's arrival bucket, -1 at the bucket after its finish's; ties summed first.
    where = np.concatenate([np.floor(arrival - start_s), np.floor(finish - start_s) + 1])
    delta = np.concatenate([np.ones(len(arrival)), -np.ones(len(finish))])
    slots, inverse = np.unique(where, return_inverse=True)
    peak_requests = int(np.cumsum(np.bincount(inverse, weights=delta, minlength=len(slots))).max())
    if itl_lists is None:
        return None, peak_requests
    # One float64 array, not a list of numpy scalars (~40 bytes a token: +300 MB for a whole trace).
    token_s = np.concatenate(
        [
            first + np.concatenate(([0.0], np.cumsum(gaps) / 1e3))
            for first, gaps in zip(df["first_token_s"], itl_lists, strict=True)
        ]
    )
    buckets = np.floor(token_s - start_s)
    last_bucket = np.floor(finish.max() - start_s)
    buckets = buckets[np.isfinite(buckets) & (buckets >= 0) & (buckets <= last_bucket)]
    if buckets.size == 0:
        return 0.0, peak_requests
    _, counts = np.unique(buckets, return_counts=True)
    return float(counts.max()), peak_requests
