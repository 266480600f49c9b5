"""Per-request table and run summary, with `vllm bench serve` / SGLang `bench_serving` definitions.

Definitions: docs/benchmarking.md §5.1 (measured hit rate) and §8, docs/apc.md §13.2-13.4.
ITLs stay out of the table (it holds scalars only, which keeps pandas and parquet simple): the
runner passes `itls_ms(records)` to `summarize`, and `tokens.jsonl` keeps the exact token ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import cast

import numpy as np
import pandas as pd

from engines.records import RequestRecord
from harness.config import MetricsConfig
from harness.errors import BadInput
from harness.summary import (
    CacheFigures,
    LatencyStats,
    RunContext,
    RunSummary,
    SglangRates,
    Throughput,
)
from workloads.request import Request

_STR = pd.StringDtype()  # nullable (pd.NA), and round-trips through parquet on pandas 2 and 3
_INT = "int64"
_FLOAT = "float64"

COLUMNS: dict[str, object] = {
    "request_id": _STR,
    "parent_id": _STR,
    "request_index": _INT,
    "sample_index": _INT,
    "session_id": _STR,
    "turn": _INT,
    "salt": _STR,
    "workload": _STR,
    "workload_version": _INT,
    "engine": _STR,
    "policy": _STR,
    "block_size": _INT,
    "seed": _INT,
    "run_id": _STR,
    "prompt_tokens": _INT,
    "cached_tokens": _INT,
    "output_tokens": _INT,
    "recomputed_tokens": _INT,
    "num_preemptions": _INT,
    "shared_prefix_len": _INT,
    "arrival_s": _FLOAT,
    "scheduled_s": _FLOAT,
    "first_token_s": _FLOAT,
    "finish_s": _FLOAT,
    "queue_delay_ms": _FLOAT,
    "ttft_ms": _FLOAT,
    "tpot_ms": _FLOAT,
    "e2el_ms": _FLOAT,
}

# Columns that legitimately differ between two runs of the same config and seed. (Under wall-clock
# arrivals the batching, and so cached/recomputed tokens and preemptions, can differ too.)
TIMING_COLUMNS: tuple[str, ...] = (
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finish_s",
    "queue_delay_ms",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
)

SLO_METRICS = ("ttft", "tpot", "e2el")  # the keys `vllm bench serve --goodput` accepts


def request_table(
    records: Iterable[RequestRecord], requests_by_id: Mapping[str, Request], context: RunContext
) -> pd.DataFrame:
    """One row per finished child request, joined with its workload Request, in arrival order.

    The order is the workload's: (Request.arrival_s, position in `requests_by_id`, sample_index).
    A record's own arrival_s is not used as the key because a dependent turn is released when the
    previous one finishes, a wall-clock time; the deterministic key keeps same-seed runs identical.
    `request_index` is the parent's position in `requests_by_id` (the generator's order).
    """
    index_of = {rid: i for i, rid in enumerate(requests_by_id)}
    ctx = asdict(context)
    rows = [
        request_row(rec, requests_by_id[rec.parent_id], index_of[rec.parent_id], ctx)
        for rec in records
    ]
    df = pd.DataFrame(rows, columns=list(COLUMNS)).astype(COLUMNS)
    release_s = [requests_by_id[pid].arrival_s for pid in df["parent_id"]]
    order = np.lexsort((df["sample_index"], df["request_index"], np.asarray(release_s, float)))
    return df.iloc[order].reset_index(drop=True)


def request_row(rec: RequestRecord, req: Request, request_index: int, ctx: dict) -> dict:
    """One finished request's row of the table (also appended to the rows file as it finishes)."""
    ttft_ms = (rec.first_token_s - rec.arrival_s) * 1e3
    e2el_ms = (rec.finish_s - rec.arrival_s) * 1e3
    # TPOT excludes the first token and is undefined for a single token (docs/apc.md §13.3).
    tpot_ms = (e2el_ms - ttft_ms) / (rec.output_tokens - 1) if rec.output_tokens > 1 else math.nan
    return {
        **ctx,
        "request_id": rec.request_id,
        "parent_id": rec.parent_id,
        "request_index": request_index,
        "sample_index": rec.sample_index,
        "session_id": req.session_id,
        "turn": req.turn,
        "salt": req.salt,
        "prompt_tokens": rec.prompt_tokens,
        "cached_tokens": rec.cached_tokens,
        "output_tokens": rec.output_tokens,
        "recomputed_tokens": rec.recomputed_tokens,
        "num_preemptions": rec.num_preemptions,
        "shared_prefix_len": req.shared_prefix_len,
        "arrival_s": rec.arrival_s,
        "scheduled_s": rec.scheduled_s,
        "first_token_s": rec.first_token_s,
        "finish_s": rec.finish_s,
        "queue_delay_ms": (rec.scheduled_s - rec.arrival_s) * 1e3,
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "e2el_ms": e2el_ms,
    }


def itls_ms(records: Iterable[RequestRecord]) -> dict[str, np.ndarray]:
    """Gaps between consecutive output tokens of each request, in ms, keyed by child request_id
    (float64 arrays: a whole trace has ~4e6 of them, 32 bytes each as Python floats in tuples)."""
    return {r.request_id: np.diff(r.token_times_s) * 1e3 for r in records}


def token_rows(
    df: pd.DataFrame, records: Iterable[RequestRecord], requests_by_id: Mapping[str, Request]
) -> list[dict]:
    """Rows for tokens.jsonl, in the table's order: request_id, prompt_ids, output_ids."""
    by_id = {r.request_id: r for r in records}
    return [
        {
            "request_id": rid,
            "prompt_ids": list(requests_by_id[by_id[rid].parent_id].prompt_ids),
            "output_ids": list(by_id[rid].output_ids),
        }
        for rid in df["request_id"]
    ]


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


def parse_slos(text: str | None) -> dict[str, float]:
    """ "ttft:200,tpot:50" -> {"ttft": 200.0, "tpot": 50.0} (ms); None or "" -> {}."""
    slos: dict[str, float] = {}
    for item in (text or "").replace(" ", ",").split(","):
        if not item:
            continue
        key, sep, value = item.partition(":")
        if not sep or key not in SLO_METRICS:
            raise BadInput(
                f"metrics.goodput: {item!r} is not <metric>:<ms> with metric one of "
                f'{", ".join(SLO_METRICS)} (e.g. metrics.goodput="ttft:200,tpot:50")'
            )
        try:
            slos[key] = float(value)
        except ValueError:
            raise BadInput(
                f"metrics.goodput: {value!r} in {item!r} is not a number of ms"
            ) from None
        if not 0 < slos[key] < math.inf:
            raise BadInput(
                f"metrics.goodput: the {key} SLO must be a positive finite number of ms, got {value}"
            )
    return slos


def _goodput(df: pd.DataFrame, slos: Mapping[str, float], duration_s: float) -> float | None:
    """Requests meeting every SLO, per second; a 1-token request's TPOT counts as 0 (vLLM)."""
    if not slos:
        return None
    good = np.ones(len(df), dtype=bool)
    for key, limit_ms in slos.items():
        values = df[f"{key}_ms"].fillna(0.0) if key == "tpot" else df[f"{key}_ms"]
        good &= values.to_numpy(dtype=float) <= limit_ms
    return _rate(int(good.sum()), duration_s)


def check_metrics(metrics: MetricsConfig) -> None:
    """Raise BadInput naming the first bad field of `metrics` (before anything is built)."""
    parse_slos(metrics.goodput)
    for p in metrics.percentiles:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 100:
            raise BadInput(f"metrics.percentiles: each must be a number in [0, 100], got {p!r}")


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


_PLAIN = frozenset({str, int, bool, type(None)})  # returned as they are


def json_safe(value: object) -> object:
    """Plain Python values only: numpy scalars/arrays unwrapped, NaN -> None, +-inf -> "inf"."""
    kind = type(value)  # exact types first: the rows file calls this for every finished request
    if kind in _PLAIN or (kind is float and math.isfinite(cast(float, value))):
        return value
    if kind is dict:
        items = cast("dict[object, object]", value).items()
        return {k: v if type(v) in _PLAIN else json_safe(v) for k, v in items}
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


_ROWS: tuple[tuple[str, str], ...] = (  # (label, summary key), as vLLM prints them
    ("Successful requests:", "completed"),
    ("Failed requests:", "failed"),
    ("Benchmark duration (s):", "duration"),
    ("Total input tokens:", "total_input_tokens"),
    ("Total generated tokens:", "total_output_tokens"),
    ("Request throughput (req/s):", "request_throughput"),
    ("Request goodput (req/s):", "request_goodput"),
    ("Output token throughput (tok/s):", "output_throughput"),
    ("Peak output token throughput (tok/s):", "max_output_tokens_per_s"),
    ("Peak concurrent requests:", "max_concurrent_requests"),
    ("Peak overlapping requests (exact):", "max_overlapping_requests"),
    ("Total Token throughput (tok/s):", "total_token_throughput"),
)
# summary["clock"]: what `duration` and every latency are measured on.
CLOCKS = {"wall": "wall clock", "virtual": "virtual clock (simulated executor)"}


def format_summary(summary: Mapping[str, object]) -> str:
    """A vLLM-style printed block, plus the prefix-cache figures; absent values print as n/a."""
    virtual = summary.get("clock") == "virtual"
    title = (
        " Serving Benchmark Result (virtual clock) " if virtual else " Serving Benchmark Result "
    )
    lines = [f"{title:=^50}"]
    if virtual:  # a simulated run's seconds are the cost model's, not the time it took
        lines.append(_line("Clock:", f"virtual, hardware {summary.get('hardware') or 'n/a'}"))
    # Goodput is printed only when SLOs were given, as vLLM does.
    lines += [
        _line(_virtual(label) if virtual else label, summary.get(key))
        for label, key in _ROWS
        if key != "request_goodput" or summary.get(key) is not None
    ]
    if summary.get("failed"):  # a partial share of failures is part of the result, said here
        share = summary.get("failed_share")
        lines.insert(4 if virtual else 3, _line("Failed share (%):", _percent(share)))
    sections = (
        ("Time to First Token", "TTFT", "ttft_ms"),
        ("Time per Output Token (excl. 1st token)", "TPOT", "tpot_ms"),
        ("Inter-token Latency", "ITL", "itl_ms"),
        ("End-to-end Latency", "E2EL", "e2el_ms"),
    )
    for heading, short, key in sections:
        lines.append(f"{heading + (' (virtual)' if virtual else ''):-^50}")
        unit = "(ms, virtual):" if virtual else "(ms):"
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            lines.append(_line(f"{label} {short} {unit}", summary.get(f"{stat}_{key}")))
    lines.append(f"{'Prefix Cache':-^50}")
    lines.append(_line("Prefix cache hit rate (%):", _percent(summary.get("hit_rate"))))
    lines.append(_line("Ideal hit rate (%):", _percent(summary.get("ideal_hit_rate"))))
    # At the engine's own block/page size above; at page 1 here, the same for every engine.
    lines.append(
        _line("Ideal hit rate, page 1 (%):", _percent(summary.get("ideal_hit_rate_token")))
    )
    lines.append(_line("Cached prompt tokens:", summary.get("prompt_tokens_cached")))
    lines.append(_line("Cache bookkeeping (ms):", summary.get("cache_bookkeeping_ms")))
    lines.append(_line("Evictions:", summary.get("evictions")))
    lines.append(_line("Preemptions:", summary.get("num_preemptions")))
    lines.append(_line("Recomputed tokens:", summary.get("recomputed_tokens")))
    lines.append("=" * 50)
    return "\n".join(lines)


def _virtual(label: str) -> str:
    """`Benchmark duration (s, virtual):`: units of time on a simulated run's clock."""
    for unit in ("(s)", "(req/s)", "(tok/s)"):
        if unit in label:
            return label.replace(unit, f"{unit[:-1]}, virtual)")
    return label


def _percent(fraction: object) -> float | None:
    return 100.0 * fraction if isinstance(fraction, (int, float)) else None


def _line(label: str, value: object) -> str:
    if value is None:
        text = "n/a"
    elif isinstance(value, float):
        text = f"{value:.2f}"
    else:
        text = str(value)
    return f"{label:<40} {text:<10}".rstrip()
