"""The step-locked twin: a concurrent server run replayed on the server's own step sequence.

Only arrivals come from the server; admission, chunking, preemption, eviction and hits stay the
twin's. The server's KV-event stream (harness/live_server/kv_events.py) has one batch per engine step
that changed its cache. A request's *anchor* is the first batch after its send that stores one of
its own prompt blocks (a block no concurrent request also holds): the server first scheduled it in
that step. The twin steps one engine step at a time; its steps that change its cache are paired
in order with the server's batches. A request anchored at the next batch enters the twin before
the step whose changes, with it, equal that batch (a trial step, undone after, decides),
and not before an earlier step that would change nothing without it (the server's step then
changed nothing either); entrants take the order the server admitted them in, which the
batch's store order shows (not always the send order). A request with no anchor (its prompt
was cached) enters at its send time on a clock interpolated between matched batches. A follow-up turn never enters before its
predecessor finished in the twin. Each twin step's changes are recorded for the block-by-block
comparison.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from engines.cache.protocol import KvEventSource
from engines.cache.records import BlockRemoved, BlockStored
from engines.engine import Engine
from engines.records import RequestRecord
from engines.snapshot import checkpoint
from harness.client.inprocess import completion_request
from harness.live_server.kv_events import KvBatch, order_problem, published_hashes
from workloads.request import Request

DEFAULT_STEP_S = 0.01  # the server's step length before two matched batches give one


@dataclass(frozen=True)
class Arrival:
    """A request to replay: what was sent, when (server wall clock), what it follows."""

    request: Request  # prompt as sent, script as returned, `after` its predecessor
    send_wall_s: float
    end_wall_s: float
    token_wall_s: tuple[float, ...] = ()  # when the client received each token (sample 0)


@dataclass
class StepLockedRun:
    records: list[RequestRecord]
    twin_batches: list[KvBatch]  # the twin's steps that changed its cache (seq = twin step)
    entered_step: dict[str, int]  # request id -> the twin step it entered before
    anchored: int  # requests placed by their own stored blocks
    timed: int  # requests placed by send time
    steps: int  # engine steps taken (vLLM counts the same in its per-step histogram)
    notes: list[str] = field(default_factory=list)


def prompt_hashes(req: Request, block_size: int, hash_algo: str = "sha256") -> list[int]:
    """The 64-bit hashes vLLM publishes for the full blocks of `req`'s prompt."""
    return published_hashes(req.prompt_ids, block_size, hash_algo, req.lora_id, req.salt)


def chains_of(arrivals: Sequence[Arrival], source: KvEventSource) -> dict[str, list[int]]:
    """request id -> the hashes `source` (the twin's cache) names its prompt's full blocks by."""
    return {
        a.request.request_id: source.kv_event_hashes(
            a.request.prompt_ids, a.request.lora_id, a.request.salt
        )
        for a in arrivals
    }


def anchors(
    arrivals: Sequence[Arrival], batches: Sequence[KvBatch], chains: dict[str, list[int]]
) -> dict:
    """request id -> index of the batch where the server first stored one of its own blocks
    (`chains`: `chains_of(arrivals, the twin's cache)`)."""
    out: dict[str, int] = {}
    for a in arrivals:
        rid = a.request.request_id
        others: set[int] = set()
        for b in arrivals:
            overlaps = b.send_wall_s < a.end_wall_s and a.send_wall_s < b.end_wall_s
            if b is not a and overlaps:
                others.update(chains[b.request.request_id])
        own = set(chains[rid]) - others
        if not own:
            continue
        for i, batch in enumerate(batches):
            if batch.ts >= a.send_wall_s and own.intersection(batch.stored):
                out[rid] = i
                break
    return out


def _seq_id(req: Request) -> str:
    return req.request_id if req.n == 1 else f"0_{req.request_id}"  # twin.child_id's sample 0


def event_source(engine: Engine) -> KvEventSource:
    """The twin's cache, which must keep KV-cache events to be step-locked."""
    cache = engine.cache
    if not isinstance(cache, KvEventSource):
        raise TypeError(f"the step-locked twin needs a KvEventSource cache, not {cache.name!r}")
    return cache


def record_events(engine: Engine) -> None:
    """Make the twin's cache keep its KV-cache events."""
    event_source(engine).record_kv_events()


def take_batch(engine: Engine, step: int) -> KvBatch | None:
    """The cache changes since the last call, as one batch (None: nothing changed)."""
    events = event_source(engine).take_kv_events()
    stored = tuple(h for e in events if isinstance(e, BlockStored) for h in e.block_hashes)
    removed = tuple(h for e in events if isinstance(e, BlockRemoved) for h in e.block_hashes)
    if not stored and not removed:
        return None
    return KvBatch(seq=step, ts=math.nan, stored=stored, removed=removed)


def _trial(engine: Engine, submit: list[Request]) -> tuple[frozenset, frozenset] | None:
    """The cache changes of the next step with `submit` entered, then undone: the engine's small
    state is saved and the pool's changes journaled (engines/snapshot.py), never the pool copied,
    so a trial costs what is in flight and what the step touched, whatever the pool's size."""
    undo = checkpoint(engine)
    try:
        now = engine.clock.now()
        for req in submit:
            engine.submit(completion_request(req, True), now)
        if not engine.has_work:
            return None
        take_batch(engine, 0)
        engine.step()
        got = take_batch(engine, 0)
        return got.changes if got is not None else None
    finally:
        undo()


MAX_TRIALS = 64  # candidates tried per step (a longer queue waits on the budget anyway)


def _lag(engine: Engine, progress: dict[str, tuple[float, ...]], ts: float) -> int:
    """How many tokens the twin's running requests are behind the server at time `ts` (the
    median over requests decoding in both; 0 when none is): tokens the client had received by
    then against tokens the twin has produced."""
    lags = []
    for seq in engine.loop.running:
        times = progress.get(seq.seq_id)
        if times and seq.num_output_tokens > 0:
            lags.append(bisect.bisect_left(times, ts) - seq.num_output_tokens)
    return int(statistics.median_low(lags)) if lags else 0


def _entering(
    engine: Engine,
    must: list[Arrival],
    pending,
    ready,
    batch: KvBatch,
    lag: int,
    chains: dict[str, list[int]],
    partner_unfinished: bool = False,
) -> list[Arrival]:
    """Who enters before this step, given that `must` (anchored at the next batch) are due.
    While the twin's running requests are behind the server's progress at the batch's time,
    nobody: the server's step that stored their blocks is still ahead. Then admission is first
    come first served, so the requests that reached the server by that step are a prefix of
    the send order: the shortest prefix of those sent by the batch's time, holding every
    `must`, whose trial step changes the cache exactly as the batch did. When none does and
    `partner_unfinished` (a turn anchored at the same batch still waits for its predecessor
    to finish in the twin), nobody yet if the step changes nothing without them: the server
    took them in one step (measured under load: a turn reached the engine one step after its
    send and was admitted with the next user's turn), so they enter together once the
    predecessor is done. Else `must`."""
    if lag > 0 and engine.has_work:
        return []
    sent = [a for a in pending if ready(a) and a.send_wall_s <= batch.ts][:MAX_TRIALS]
    held = [sent.index(a) for a in must if a in sent]
    first = max(held) + 1 if held else 0
    if not engine.has_work:
        return _as_stored(engine, must, batch, chains)
    for j in range(first, len(sent) + 1):
        if _trial(engine, [a.request for a in sent[:j]]) == batch.changes:
            return _as_stored(engine, sent[:j], batch, chains)
    if partner_unfinished and _trial(engine, []) is None:
        return []
    return _as_stored(engine, must, batch, chains)


def _as_stored(
    engine: Engine, group: list[Arrival], batch: KvBatch, chains: dict[str, list[int]]
) -> list[Arrival]:
    """`group` in the order the server admitted it. vLLM stores a step's new blocks request by
    request in scheduling order, and its waiting queue is first come first served, so where a
    request's first own block (one no other of the group holds) sits in the batch is its place.
    The send order is not always it: a request can reach the engine after later-sent ones
    (measured: one turn sent 7 ms before nine others was admitted after them). Requests with no
    own block in the batch keep their slots; the reordering stands if its trial step still
    changes the cache as the batch did."""
    place = {h: i for i, h in reversed(list(enumerate(batch.stored)))}  # first occurrence
    key: dict[str, int] = {}
    for a in group:
        others = {h for b in group if b is not a for h in chains[b.request.request_id]}
        own = [place[h] for h in chains[a.request.request_id] if h in place and h not in others]
        if own:
            key[a.request.request_id] = min(own)
    keyed = iter(
        sorted(
            (a for a in group if a.request.request_id in key),
            key=lambda a: key[a.request.request_id],
        )
    )
    ordered = [next(keyed) if a.request.request_id in key else a for a in group]
    if ordered == group or not engine.has_work:
        return ordered
    return ordered if _trial(engine, [a.request for a in ordered]) == batch.changes else group


def replay(
    engine: Engine, arrivals: Sequence[Arrival], batches: Sequence[KvBatch], block_size: int
) -> StepLockedRun:
    """Drive `engine` (decode runs off) through `arrivals` on the server's step sequence."""
    order = sorted(arrivals, key=lambda a: a.send_wall_s)
    chains = chains_of(order, event_source(engine))
    anchor = anchors(order, batches, chains)
    pending = list(order)
    replayed = {a.request.request_id for a in order}
    progress = {_seq_id(a.request): a.token_wall_s for a in order}
    finished: set[str] = set()
    entered: dict[str, int] = {}
    twin_batches: list[KvBatch] = []
    engine.restart()
    record_events(engine)
    k, step = 0, 0  # server batches paired so far; twin steps taken
    last_ts, last_step, step_s = None, 0, DEFAULT_STEP_S
    notes: list[str] = []
    problem = order_problem(batches)
    if problem:  # replayed all the same (an offline look), but the pairing is not to be trusted
        notes.append(f"the server's stream is not its steps in order: {problem}")
    if order and not anchor:
        notes.append(
            f"no request's own prompt block is in the server's {len(batches)} batches: "
            "every request entered by its send time"
        )

    def ready(a: Arrival) -> bool:
        after = a.request.after
        return after is None or after not in replayed or after in finished

    def submit(group: list[Arrival]) -> None:
        now = engine.clock.now()
        for a in group:
            engine.submit(completion_request(a.request, True), now)
            entered[a.request.request_id] = step
            pending.remove(a)

    while pending or engine.has_work:
        # when the twin's next step starts on the server's clock (interpolated)
        if last_ts is not None:
            start_s = last_ts + (step - last_step) * step_s
        else:
            first = min(
                (a.send_wall_s for a in order if a.request.request_id in entered), default=-math.inf
            )
            start_s = first + step * step_s
        late, trial = [], []
        for a in pending:
            if not ready(a):
                continue
            at = anchor.get(a.request.request_id)
            if at is not None and at < k:
                late.append(a)  # the server stored its blocks already: enter now
            elif at is not None and at == k:
                trial.append(a)  # its blocks are in the next batch to pair
            elif at is None and a.send_wall_s <= start_s:
                late.append(a)
        submit(late)
        if trial:
            lag = _lag(engine, progress, batches[k].ts)
            partner = any(not ready(a) and anchor.get(a.request.request_id) == k for a in pending)
            submit(_entering(engine, trial, pending, ready, batches[k], lag, chains, partner))
        if not engine.has_work:
            nxt = next((a for a in pending if ready(a)), None)
            if nxt is None:
                if pending:
                    notes.append(f"{len(pending)} requests never became ready (missing turns)")
                break
            submit([nxt])
            continue
        engine.step()
        step += 1
        got = take_batch(engine, step)
        if got is not None:
            twin_batches.append(got)
            skipped = k + 1 < len(batches) and got.changes != batches[k].changes
            if skipped and got.changes == batches[k + 1].changes:
                k += 1  # the twin made no step of the server's batch k: pair with k + 1
            if k < len(batches):
                ts = batches[k].ts
                if last_ts is not None and step > last_step:
                    step_s = max(1e-4, (ts - last_ts) / (step - last_step))
                last_ts, last_step = ts, step
            k += 1
        for rec in engine.records:
            finished.add(rec.parent_id)
    engine.idle()
    return StepLockedRun(
        records=list(engine.records),
        twin_batches=twin_batches,
        entered_step=entered,
        anchored=sum(1 for a in order if a.request.request_id in anchor),
        timed=sum(1 for a in order if a.request.request_id not in anchor),
        steps=step,
        notes=notes,
    )


def compare(server: Sequence[KvBatch], twin: Sequence[KvBatch]) -> dict:
    """Block-by-block: the i-th cache-changing step of each stores and removes the same block
    hashes (as sets within a step, in step order); totals and the first difference."""
    first: dict[str, object] | None = None
    equal = 0
    for i, (s, t) in enumerate(zip(server, twin)):
        if s.changes == t.changes:
            equal += 1
        elif first is None:
            first = {
                "index": i,
                "server_stored": len(s.stored),
                "twin_stored": len(t.stored),
                "server_removed": len(s.removed),
                "twin_removed": len(t.removed),
                "only_server": len(s.changes[0] - t.changes[0]) + len(s.changes[1] - t.changes[1]),
                "only_twin": len(t.changes[0] - s.changes[0]) + len(t.changes[1] - s.changes[1]),
            }
    if first is None and len(server) != len(twin):
        first = {"index": min(len(server), len(twin)), "reason": "one stream is longer"}
    return {
        "server_steps_with_events": len(server),
        "twin_steps_with_events": len(twin),
        "steps_equal": equal,
        "server_stored_blocks": sum(len(b.stored) for b in server),
        "twin_stored_blocks": sum(len(b.stored) for b in twin),
        "server_removed_blocks": sum(len(b.removed) for b in server),
        "twin_removed_blocks": sum(len(b.removed) for b in twin),
        "identical": first is None,
        "first_difference": first,
    }
