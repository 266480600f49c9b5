"""[1/6] Asynchronous scheduling caches the block completed by a finished request's last
scheduled token before freeing, as vLLM 0.33's `Scheduler.update_from_output` does.

A request finishes on a sampled token that is never scheduled, so its KV covers
`prompt + output - 1` tokens. When that count is a multiple of the block size, the last full
block was completed by the last *scheduled* token, which the async known-token cap held back at
allocation; the catch-up at finish caches it, so a follow-up hits as much as in sync mode.
"""

from __future__ import annotations

from collections import deque

import pytest

from engines.cache.apc import ApcCache
from engines.sched.base import StepBudget
from engines.sched.vllm import VllmScheduler as ApcAdmission
from engines.sequence import SeqStatus, Sequence
from harness.client.inprocess import drive
from tests.engine_util import by_id, make_engine
from workloads.request import Request


def _cache(bs: int, num_blocks: int = 128) -> ApcCache:
    return ApcCache(num_blocks, bs, none_hash_seed="0", debug=True)


def _run_alone(adm: ApcAdmission, seq: Sequence, output_ids: list[int]) -> None:
    """Drive one request to completion, one scheduler step at a time (tokens from a script)."""
    script = iter(output_ids)
    waiting, running = deque([seq]), list[Sequence]()
    while not seq.is_finished:
        plan = adm.schedule(waiting, running, StepBudget(8, 1024))
        finished = []
        for item in plan.scheduled:
            item.seq.num_computed_tokens = item.end
            if item.end == item.seq.num_tokens:
                item.seq.token_ids.append(next(script))
                if item.seq.done_generating:
                    item.seq.status = SeqStatus.FINISHED
                    finished.append(item.seq)
        running[:] = [s for s in running if s not in finished]
        adm.finish_step(plan, finished)
        adm.cache.check_integrity()


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_worked_example_416_prompt_17_outputs_follow_up_hits_432(async_scheduling):
    cache = _cache(bs=16)
    adm = ApcAdmission(cache, async_scheduling=async_scheduling)
    prompt = list(range(1000, 1416))
    outputs = list(range(5000, 5017))
    first = Sequence("turn0", list(prompt), len(prompt), len(outputs))
    _run_alone(adm, first, outputs)
    assert first.num_computed_tokens == 416 + 16
    assert cache.manager.num_cached_block.get("turn0") is None  # freed
    assert len(cache.pool.cached_block_hash_to_block) == 27  # 432 / 16 blocks cached
    follow = prompt + outputs + list(range(7000, 7020))
    nxt = Sequence("turn1", follow, len(follow), 1)
    assert cache.match(nxt).num_tokens == 432


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_invariant_32_block_of_last_scheduled_token_is_cached_at_finish(async_scheduling):
    """B = 4, 7-token prompt, two outputs: the first sampled token completes block 2 and is the
    last scheduled one; the second finishes the request. Block 2 is cached in both modes."""
    cache = _cache(bs=4)
    adm = ApcAdmission(cache, async_scheduling=async_scheduling)
    seq = Sequence("a", list(range(7)), 7, 2)
    _run_alone(adm, seq, [100, 101])
    assert len(cache.pool.cached_block_hash_to_block) == 2
    probe = Sequence("b", list(range(7)) + [100, 101, 102], 10, 1)
    assert cache.match(probe).num_tokens == 8


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_block_completed_only_by_the_final_sampled_token_is_never_cached(async_scheduling):
    """B = 4, 7-token prompt, one output: that token is never scheduled, so block 2 is lost."""
    cache = _cache(bs=4)
    adm = ApcAdmission(cache, async_scheduling=async_scheduling)
    seq = Sequence("a", list(range(7)), 7, 1)
    _run_alone(adm, seq, [100])
    assert len(cache.pool.cached_block_hash_to_block) == 1


def test_catch_up_is_a_no_op_with_caching_off():
    cache = ApcCache(64, 16, enabled=False, none_hash_seed="0")
    adm = ApcAdmission(cache, async_scheduling=True)
    seq = Sequence("a", list(range(31)), 31, 2)
    _run_alone(adm, seq, [1, 2])
    assert cache.usage().available == cache.capacity_tokens


def _conversation(block_size: int, turns: int = 4) -> list[Request]:
    """One multi-turn chat whose every turn has prompt + output - 1 on a block boundary."""
    history: tuple[int, ...] = ()
    out = []
    next_token = 10
    for t in range(turns):
        user = tuple(range(next_token, next_token + 29))
        next_token += 29
        prompt = history + user
        # output length so that len(prompt) + output - 1 is a multiple of the block size
        output_len = block_size - (len(prompt) - 1) % block_size
        output_len += block_size if output_len < 2 else 0
        reply = tuple(range(next_token, next_token + output_len))
        next_token += output_len
        rid = f"c0t{t}"
        out.append(
            Request(
                request_id=rid,
                prompt_ids=prompt,
                output_ids=reply,
                after=f"c0t{t - 1}" if t else None,
            )
        )
        assert (len(prompt) + output_len - 1) % block_size == 0
        history = prompt + reply
    return out


def test_multiturn_async_cached_tokens_equal_sync_on_block_aligned_turns():
    requests = _conversation(block_size=16)
    cached = {}
    for mode in (False, True):
        engine = make_engine("apc", async_scheduling=mode, debug_checks=True)
        records = by_id(drive(engine, requests))
        cached[mode] = [records[r.request_id].cached_tokens for r in requests]
    assert cached[True] == cached[False]
    # every follow-up reuses the whole previous turn's KV (prompt + output - 1 tokens)
    for prev, hit in zip(requests, cached[True][1:]):
        assert hit == len(prev.prompt_ids) + prev.output_len - 1
