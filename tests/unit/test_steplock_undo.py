"""The step-locked twin's trial steps are undone exactly, in O(what they touched), at any pool size.

A trial (harness/live_server/steplock.py `_trial`) enters requests, takes one engine step and
undoes both: the engine's small state is saved (engines/snapshot.py), the apc pool's changes are
journaled (engines/cache/apc/undo.py). Before, the trial deep-copied the engine: a pool of 2,048
blocks or more raised RecursionError (its free queue is a linked list) and every trial cost
O(pool). Here: after a trial that preempts and evicts, every block, link, map entry, counter and
sequence is as before, the journal held a few blocks of a 131,072-block pool, and the engine
goes on exactly as one that never tried; a recorded vLLM-CPU run replays through 131,072 blocks.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from engines.build import build_engine
from engines.config import EngineConfig
from engines.snapshot import checkpoint
from harness.client.inprocess import completion_request
from harness.live_server import steplock
from harness.live_server.kv_events import KvBatch
from harness.live_server.twin import _Context, twin_hardware
from tests.steplock_util import DATA
from tests.steplock_util import arrivals as recorded_arrivals

BIG = 131_072


def _case(name: str = "mt16-burst-a") -> dict:
    with gzip.open(DATA / f"{name}.json.gz", "rt") as f:
        return json.load(f)


def _engine(case: dict, blocks: int):
    bs = case["engine"]["block_size"]
    fields = dict(case["engine"], kv_capacity_tokens=(blocks - 1) * bs)
    cfg = dataclasses.replace(EngineConfig(), **fields, decode_runs=False)
    engine = build_engine(
        cfg,
        _Context(case["server"]["max_model_len"]),
        executor="simulated",
        hardware=twin_hardware(None),
    )
    steplock.record_events(engine)
    return engine


def _state(engine) -> tuple:
    """Everything a step can change, block by block (an apc engine's pool walked whole)."""
    pool = engine.cache.pool
    manager = engine.cache.manager
    queue = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
    blocks = [(b.ref_cnt, b.block_hash, b.provenance) for b in pool.blocks]
    entries = {
        k: sorted(b.block_id for b in pool.cached_block_hash_to_block.get_all_blocks(k))
        for k in pool.cached_block_hash_to_block
    }
    counters = (pool.get_num_free_blocks(), pool.num_free_cached, pool.num_evictions)
    tables = {sid: [b.block_id for b in t] for sid, t in manager.req_to_blocks.items()}
    seqs = [
        (s.seq_id, s.status, s.num_computed_tokens, tuple(s.token_ids), s.num_preemptions)
        for s in (*engine.loop.waiting, *engine.loop.running)
    ]
    stats = (
        dataclasses.astuple(manager.total_stats),
        dataclasses.astuple(manager.prefix_cache_stats),
    )
    return (
        queue,
        blocks,
        entries,
        counters,
        tables,
        dict(manager.num_cached_block),
        seqs,
        stats,
        list(pool.events.events),
        engine.clock.now(),
        engine.loop.num_steps,
        [r.request_id for r in engine.records],
    )


def _submit(engine, arrivals) -> None:
    now = engine.clock.now()
    for a in arrivals:
        engine.submit(completion_request(a.request, True), now)


def _preemptions(engine) -> int:
    return sum(s.num_preemptions for s in (*engine.loop.waiting, *engine.loop.running))


def _run(engine, arrivals, before_step=None) -> list[tuple]:
    """Every turn, entered once its predecessor finished; `before_step(engine, step, pending)`
    before each step (`pending`: the turns not entered yet)."""
    pending, done, step = list(arrivals), set(), 0
    while pending or engine.has_work:
        ready = [a for a in pending if a.request.after is None or a.request.after in done]
        for a in ready:
            pending.remove(a)
        _submit(engine, ready)
        if before_step is not None:
            before_step(engine, step, pending)
        engine.step()
        step += 1
        done |= {r.parent_id for r in engine.records}
    return [
        (r.request_id, r.cached_tokens, r.num_preemptions, r.output_ids) for r in engine.records
    ]


@pytest.mark.parametrize(("blocks", "every"), [(129, 1), (BIG, 40)])
def test_a_trial_step_is_undone_exactly_and_journals_only_what_it_touched(blocks, every):
    """A trial before each step (every 40th on the big pool: the check walks the whole pool),
    entering the next turn early: some evict cached blocks and preempt on 129 blocks."""
    case = _case()
    arrivals = recorded_arrivals(case)
    seen = {"evicting": 0, "preempting": 0, "trials": 0, "most_touched": 0}

    def trial(engine, step: int, pending: list) -> None:
        if step % every:
            return
        before = _state(engine)
        evictions, preemptions = engine.cache.pool.num_evictions, _preemptions(engine)
        undo = checkpoint(engine)
        _submit(engine, pending[:1])  # a turn entered early, as the twin's trials do
        engine.step()
        seen["evicting"] += engine.cache.pool.num_evictions > evictions
        seen["preempting"] += _preemptions(engine) > preemptions
        seen["most_touched"] = max(seen["most_touched"], engine.cache.pool.journal.blocks_touched)
        seen["trials"] += 1
        undo()
        assert engine.cache.pool.journal is None
        assert _state(engine) == before, f"step {step}"

    tried = _run(_engine(case, blocks), arrivals, trial)
    assert tried == _run(_engine(case, blocks), arrivals)  # the trials left nothing behind
    assert len(tried) == 48 and seen["trials"] > 3
    # one step of at most 2,048 tokens: 64 new blocks, the blocks it frees, queue neighbours
    assert seen["most_touched"] < 300
    if blocks == 129:
        assert seen["evicting"] and seen["preempting"], seen


def test_a_recorded_run_replays_through_a_131072_block_pool():
    """The deep-copying trial raised RecursionError from 2,048 blocks. At any pool where nothing
    is evicted the twin's outcome is the same, block by block, whatever the pool's size."""
    case = _case()
    batches = [KvBatch.from_row(row) for row in case["kv_batches"]]
    runs = {}
    for blocks in (2048, BIG):
        run = steplock.replay(_engine(case, blocks), recorded_arrivals(case), batches, 32)
        runs[blocks] = (
            {r.request_id: r.cached_tokens for r in run.records},
            [b.changes for b in run.twin_batches],
        )
    cached, stream = runs[BIG]
    assert runs[2048] == runs[BIG]
    assert len(cached) == len(case["requests"]) == 48
    assert all(not removed for _, removed in stream)  # nothing evicted from 131,072 blocks
    # with room for everything, no request hits less than it did on the server's 129 blocks
    assert all(cached[rid] >= n for rid, n in case["cached_tokens"].items())
    assert sum(cached.values()) > sum(case["cached_tokens"].values())
