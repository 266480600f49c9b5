"""Driving a stream through a started real router, the routing twin predicting each decision
first: waves of requests sent at once, streamed (harness/routers/streamed.py), each reply's worker
and token times read back, the twin taught the actual decisions, and each miss's cause (the
arrival orders searched, harness/routers/replay.py). harness/routers/fleet.py starts the workers
and the router; this module only sends and predicts.
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from engines.errors import BadInput
from harness.fleet.config import FleetConfig
from harness.fleet.policies import (
    ROUTERS,
    CacheAware,
    ConsistentHash,
    FleetView,
    RoundRobin,
    Routed,
    Router,
)
from harness.routers.faults import FleetFault
from harness.routers.kv_cost import VllmKvAware
from harness.routers.kv_index import KvEventIndex
from harness.routers.learned import LearnedRoundRobin
from harness.routers.replay import OTHER, search
from harness.routers.streamed import RouterClient

if TYPE_CHECKING:
    from harness.routers.fleet import Workers

# A request as the router's tree reads it (vllm-router's cache_aware: the prompt's token ids, as a
# worker's /tokenize gives them; docs/fleet.md §5): what the twin predicts from and records
TreeKey = Callable[[Routed], Routed]


@dataclass(frozen=True)
class Decision:
    request_id: str
    predicted: int
    actual: int
    cached_tokens: int
    wave: int = 0  # the requests of one wave were sent at once (concurrency > 1)
    # False: predicted while a fact it needs was still unknown (a slot of round robin's order):
    # a guess, reported apart from the score
    learned: bool = True
    # the reply's usage and its times (seconds from the first wave's send), for a run's rows
    prompt_tokens: int = 0
    output_tokens: int = 0
    sent_s: float = 0.0
    done_s: float = 0.0
    # a miss's cause (harness/routers/replay.py: tie, arrival, other); "" for a hit, or a policy
    # whose misses are not replayed
    cause: str = ""
    # each output token's arrival, as streamed (same clock as sent_s); () when none came
    token_times_s: tuple[float, ...] = ()
    # kv_aware: the prompt's cached prefix on the worker that served it, as the twin's index of
    # the workers' KV events held it when predicting (None: no index); a worker reporting other
    # `cached_tokens` published events that do not describe its cache
    twin_cached: int | None = None


class Predicted(NamedTuple):
    """The twin's decision for one request of a wave."""

    worker: int
    ties: list[int] | None  # the workers it found tied (cache_aware's cold prompts), else None
    cached: list[int] | None  # each worker's cached prefix per its KV events (kv_aware), else None


def order_only(decisions: Sequence[Decision]) -> int:
    """Misses in waves whose predicted workers, as a multiset, are the actual ones: the router
    made the twin's decisions, in the order the requests reached it rather than the send order."""
    waves: dict[int, list[Decision]] = {}
    for d in decisions:
        waves.setdefault(d.wave, []).append(d)
    return sum(
        sum(d.predicted != d.actual for d in wave)
        for wave in waves.values()
        if sorted(d.predicted for d in wave) == sorted(d.actual for d in wave)
    )


def one_at_a_time(decisions: Sequence[Decision]) -> list[Decision]:
    """The decisions of the waves of one request (a spreading stream's score counts these: its
    placement wave is reported apart)."""
    size = Counter(d.wave for d in decisions)
    return [d for d in decisions if size[d.wave] == 1]


def drive_router(
    router_url: str,
    model: str,
    stream: list[Routed],
    twin_cfg: FleetConfig,
    workers: Workers,
    index: KvEventIndex | None = None,
    concurrency: int = 1,
    order: list[int] | None = None,
    facts: dict[str, object] | None = None,
    waves: Sequence[Sequence[Routed]] | None = None,
    deliver: Callable[[Decision], None] | None = None,
    max_tokens: Mapping[str, int] | None = None,
    key: TreeKey | None = None,
) -> list[Decision]:
    """Send the stream in waves of `concurrency` requests (all of a wave at once, the next wave
    when it is answered; `waves`: the waves themselves instead, `max_tokens`: each request's
    output length, else 2; `deliver`: each decision as its wave ends); the twin predicts each decision first, in send order, counting its own
    picks within the wave as the router's in-flight load. The twin then learns the actual
    decisions (teacher forcing: round robin's turn, or a wave's workers, cache_aware's tree always), so
    one miss is not counted twice. With `index`, the twin reads each
    worker's cached prefix from its KV events (kv_aware). Round robin's twin cycles in the
    router's `order` when known (vllm-router's start log), else learns it from the decisions
    (one at a time, or each wave's workers: harness/routers/rr_cycles.py);
    what it learned and the router's first pick (the warm-up's) go into `facts`. `key`: each
    request as the router's tree reads it, for the twin (else the request as sent)."""
    urls = workers.urls
    twin: Router = (
        CacheAware(twin_cfg, all_tenants=False, cold_least_load=True, order=order)
        if twin_cfg.router == "cache_aware"
        else ConsistentHash(twin_cfg, names=urls)  # the real ring: points named by worker URL
        if twin_cfg.router == "consistent_hash"
        else LearnedRoundRobin(len(urls), order)
        if twin_cfg.router == "round_robin"
        else VllmKvAware(len(urls), order)  # the router's own rule, its load term included
        if twin_cfg.router == "kv_aware"
        else ROUTERS.get(twin_cfg.router)(twin_cfg)
    )
    facts = {} if facts is None else facts
    warmup = Routed("warmup", "prefixbench fleet warm-up: a prompt no other request shares")
    if index is not None:  # a prompt of token ids the stream never uses
        warmup = Routed("warmup", tuple(range(40_100, 40_140)))
    if concurrency > 1 and workers.served_by.one_at_a_time:
        raise BadInput("these workers tell who served a request one request at a time only")
    if waves is None:
        waves = [stream[i : i + concurrency] for i in range(0, len(stream), concurrency)]
    tokens = {} if max_tokens is None else max_tokens
    out = []
    t0 = time.perf_counter()  # the streaming client's clock
    # vllm-router 0.1.17's kv_aware ignores its KV index for a request with `return_token_ids`
    # (observed 2026-12-07: a prompt whose prefix only worker 1 holds went to worker 0): without
    # ids, a row's token times are its chunks with text (docs/fleet.md §5)
    client = RouterClient(router_url, token_ids=twin_cfg.router != "kv_aware")
    try:
        for w, wave in enumerate([[warmup], *waves]):
            if index is not None:
                index.refresh()  # the events of the previous wave's steps
            now = time.perf_counter() - t0
            # round robin: whether every order still possible gives this wave the same workers
            learned = not isinstance(twin, LearnedRoundRobin) or twin.certain_for(len(wave))
            known = list(twin.order) if isinstance(twin, CacheAware) else []
            seen = [r if key is None else key(r) for r in wave]  # the twin's view of the wave
            predicted = _predict_wave(twin, seen, len(urls), now, index)
            workers.served_by.before()
            replies = client.wave(model, wave, [tokens.get(r.request_id, 2) for r in wave])
            actuals = [workers.served_by.after(got.reply) for got in replies]
            causes = _causes(twin, seen, predicted, actuals, len(urls), now, facts)
            for req, view, (guess, ties, cached), got, actual, cause in zip(
                wave, seen, predicted, replies, actuals, causes
            ):
                if len(wave) == 1 or isinstance(twin, CacheAware):
                    _teach(twin, view, guess, actual, now)
                sure = learned
                if isinstance(twin, CacheAware) and ties is not None:
                    # a tie broken by an order not known yet when the wave was predicted: a guess
                    sure = len(ties) < 2 or guess in known
                    if len(wave) == 1:  # a wave of more is learned from by its replay
                        twin.learn_tie(ties, actual)
                if req is warmup:  # the router's first pick: reported apart, never scored
                    facts.update(first_pick=actual, first_pick_predicted=guess)
                    facts.update(first_pick_learned=sure)
                    continue
                decision = Decision(
                    req.request_id, guess, actual, got.reply.cached_tokens or 0, w, sure,
                    got.reply.prompt_tokens or 0, got.output_tokens,
                    got.reply.send_s - t0, got.reply.finish_s - t0, cause,
                    tuple(t - t0 for t in got.token_times_s),
                    None if cached is None else cached[actual],
                )  # fmt: skip
                out.append(decision)
                if deliver is not None:
                    deliver(decision)
            if isinstance(twin, LearnedRoundRobin) and len(wave) > 1:
                twin.learn_wave(actuals)  # which workers took the wave, in no known order
            if workers.dead():  # the router may route around it; the run is no longer ours
                raise FleetFault("a worker exited during the run")
    finally:
        client.close()
    if isinstance(twin, (LearnedRoundRobin, VllmKvAware)):
        facts.update(twin.facts())
    if isinstance(twin, VllmKvAware):
        facts.update(order_source="start log" if order is not None else "URL order (assumed)")
    if isinstance(twin, CacheAware):
        source = "tie decisions" if order is None else "start log, tie decisions"
        facts.update(worker_order=list(twin.order), order_source=source)
    return out


def _causes(
    twin: Router,
    wave: Sequence[Routed],
    predicted: Sequence[Predicted],
    actuals: Sequence[int],
    num_workers: int,
    now: float,
    facts: dict[str, object],
) -> list[str]:
    """Each decision's miss cause ("" for a hit): cache_aware's waves of more than one request
    searched for an arrival order that reproduces them (harness/routers/replay.py), the worker
    order of the one found then the twin's; a search cut short is counted in `facts`
    (`replays_cut_short`: its misses are `other`, no order found)."""
    missed = [p.worker != actual for p, actual in zip(predicted, actuals)]
    if not isinstance(twin, CacheAware) or len(wave) < 2 or not any(missed):
        return [""] * len(wave)
    found = search(twin, wave, actuals, num_workers, now)
    if found.cause != OTHER:
        twin.order = found.settled
    if found.exhausted:
        cut = facts.get("replays_cut_short", 0)
        facts["replays_cut_short"] = (cut if isinstance(cut, int) else 0) + 1
    return [found.cause if m else "" for m in missed]


def _predict_wave(
    twin: Router, wave: list[Routed], num_workers: int, now: float, index: KvEventIndex | None
) -> list[Predicted]:
    """The twin's decisions for a wave in send order, each seeing the ones before it in flight
    (and, for cache_aware, in its tree: the router inserts a request as it routes it; the twin
    does so on a copy, its own tree then taking the actual decisions)."""
    loads = [0] * num_workers
    out = []
    if isinstance(twin, VllmKvAware):
        twin.begin_wave()  # the wave before is answered: none of its prefill is pending
    if isinstance(twin, CacheAware) and len(wave) > 1:
        twin = copy.deepcopy(twin)
    for req in wave:
        view = FleetView(list(loads), now)
        if index is not None:
            view.cached = index.cached_tokens(req.prompt)  # type: ignore[arg-type]
        ties = None
        if isinstance(twin, CacheAware):
            guess, ties = twin.decide(req, view), twin.ties
            if len(wave) > 1:
                twin.record(req, guess, now)
        else:
            guess = twin.choose(req, view)
        loads[guess] += 1
        out.append(Predicted(guess, ties, view.cached))
    return out


def send_completion(
    client: object, router_url: str, model: str, req: Routed, max_tokens: int = 2
) -> dict:
    import httpx

    assert isinstance(client, httpx.Client)
    headers = {"X-Session-ID": req.session_id} if req.session_id else {}
    prompt = req.prompt if isinstance(req.prompt, str) else list(req.prompt)
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    reply = client.post(f"{router_url}/v1/completions", json=body, headers=headers)
    reply.raise_for_status()
    return dict(reply.json())


def _teach(twin: Router, req: Routed, predicted: int, actual: int, now: float) -> None:
    """The twin continues from the router's actual decision (teacher forcing)."""
    if isinstance(twin, CacheAware):
        twin.record(req, actual, now)
    elif isinstance(twin, LearnedRoundRobin):
        twin.learn(actual)
    elif isinstance(twin, RoundRobin):
        twin.next = actual + 1
