"""The per-request table: one row per finished child request, with `vllm bench serve` /
SGLang `bench_serving` definitions (docs/benchmarking.md §8, docs/apc.md §13.2-13.4).

ITLs stay out of the table (it holds scalars only, which keeps pandas and parquet simple):
`itls_ms(records)` goes to `harness.metrics.summarize`, and `tokens.jsonl` keeps the token ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict

import numpy as np
import pandas as pd

from engines.records import RequestRecord
from harness.metrics.summary import RunContext
from harness.results.columns import COLUMNS
from workloads.request import Request


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
        "host_cached_tokens": rec.host_cached_tokens,
        "host_load_bytes": rec.host_load_bytes,
        "host_store_bytes": rec.host_store_bytes,
        "host_load_ms": rec.host_load_s * 1e3,
        "storage_cached_tokens": rec.storage_cached_tokens,
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
