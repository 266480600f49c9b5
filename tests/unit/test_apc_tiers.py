"""vLLM's CPU offloading tier behind apc, one rule per test, on hand-made streams of 300-token
prompts over 640 device tokens (docs/tiers.md §2). Fillers are fresh 300-token prompts that push
the previous prompt out of the device cache."""

from __future__ import annotations

import pytest

from engines.cache.apc.tiered import TieredApcCache
from engines.cache.records import Allocation
from engines.cache.tiers import HostTier
from engines.sequence import Sequence
from tests.tier_streams import Prompts, send, tier_engine, tiers

OUT = (101, 102, 103, 104)


def fill(engine, prompts: Prompts, n: int = 3, tag: str = "f") -> None:
    for i in range(n):
        send(engine, f"{tag}{i}", prompts.tokens(300), OUT)


def test_a_resent_prompt_after_device_eviction_hits_its_complete_blocks_in_the_host_tier():
    prompts = Prompts()
    engine = tier_engine(tokens=4096)
    a = prompts.tokens(300)
    assert tiers(send(engine, "a1", a, OUT)) == (0, 0)
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 288)  # 18 complete blocks of 16


def test_the_incomplete_last_chunk_is_never_stored():
    prompts = Prompts()
    engine = tier_engine(tokens=4096, blocks_per_chunk=4)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 256)  # 4 chunks of 64; 44 tokens never stored


def test_store_threshold_two_stores_on_the_second_sight_and_hits_on_the_third():
    prompts = Prompts()
    engine = tier_engine(tokens=4096, store_threshold=2)
    a = prompts.tokens(300)
    assert tiers(send(engine, "a1", a, OUT)) == (0, 0)
    fill(engine, prompts, tag="f")
    assert tiers(send(engine, "a2", a, OUT)) == (0, 0)  # seen twice now: stored
    fill(engine, prompts, tag="g")
    assert tiers(send(engine, "a3", a, OUT)) == (0, 288)


@pytest.mark.parametrize(("policy", "expected"), [("lru", 0), ("arc", 288)])
def test_after_a_scan_lru_has_lost_a_reused_prompt_and_arc_keeps_it(policy, expected):
    prompts = Prompts()
    engine = tier_engine(tokens=1280, policy=policy)  # 80 chunks
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts, tag="f")
    assert tiers(send(engine, "a2", a, OUT)) == (0, 288)  # a reuse: ARC moves it to T2
    fill(engine, prompts, n=5, tag="scan")  # 90 new chunks, each seen once
    assert tiers(send(engine, "a3", a, OUT)) == (0, expected)


@pytest.mark.parametrize(("prompt_only", "expected"), [(True, 288), (False, 336)])
def test_offload_prompt_only_false_stores_the_output_too(prompt_only, expected):
    prompts = Prompts()
    engine = tier_engine(tokens=4096, offload_prompt_only=prompt_only)
    turn1 = prompts.tokens(300)
    reply = tuple(range(2000, 2040))  # 40 output tokens: 339 committed tokens, 21 blocks
    send(engine, "t1", turn1, reply)
    fill(engine, prompts)
    turn2 = turn1 + reply + prompts.tokens(30)
    assert tiers(send(engine, "t2", turn2, OUT)) == (0, expected)


def test_a_whole_prompt_host_hit_computes_the_last_token_again():
    prompts = Prompts()
    a = prompts.tokens(320)
    device_only = tier_engine(tokens=0)
    send(device_only, "a1", a, OUT)
    assert tiers(send(device_only, "a2", a, OUT)) == (304, 0)  # the last-token rule: 19 blocks
    engine = tier_engine(tokens=4096, step_log=True)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 320)  # all 20 chunks loaded ...
    first = next(step for step in engine.loop.step_log if ("a2", 1) in step.scheduled)
    assert (
        first.kind != "decode"
        and not any(  # ... and the prefill computes the last token
            rid == "a2" for step in engine.loop.step_log[: first.index] for rid, _ in step.scheduled
        )
    )


def test_the_host_lookup_starts_past_the_device_hit():
    prompts = Prompts()
    engine = tier_engine(tokens=4096)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts, n=2)  # a's tail blocks are evicted first (freed tail first)
    device, host = tiers(send(engine, "a2", a, OUT))
    assert 0 < device < 288 and device + host == 288


def test_stores_are_written_a_step_late_and_readable_two_plans_after_that():
    """vLLM's worker starts a step's stores with the next step, and the scheduler learns they are
    done when that step's output is processed, after it planned the step after: a chunk computed
    in step k is readable from step k + 3 (each `host_after_step` follows the next plan)."""
    engine = tier_engine(tokens=4096)
    cache = engine.loop.scheduler.cache
    assert isinstance(cache, TieredApcCache)
    seq = Sequence("s", list(range(1, 65)), num_prompt_tokens=64, max_new_tokens=1)
    again = Sequence("t", list(range(1, 65)), num_prompt_tokens=64, max_new_tokens=1)
    assert cache.allocate([Allocation(seq, 64)])
    cache.host_after_schedule([(seq, 64)])  # step k computes the prompt: its stores planned
    assert cache.host_lookup(again, 0) is None  # being written: a request would wait
    assert cache.host_lookup(seq, 0) is None  # its own transfers in flight: it waits too
    cache.host_after_step([])  # step k + 1 planned; step k - 1's output processed
    cache.host_after_step([])  # step k + 2 planned; step k's output: the worker now writes them
    assert cache.host_lookup(again, 0) is None
    cache.host_after_step([])  # step k + 3 planned after step k + 1's output: written
    assert cache.host_lookup(again, 0) == 64


def test_a_reset_clears_the_host_tier():
    prompts = Prompts()
    engine = tier_engine(tokens=4096)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    cache = engine.loop.scheduler.cache
    assert cache.reset()
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 0)
    assert cache.host_stats().stored == 3 * 288 + 288  # the fillers and a2 since the reset


def test_the_tier_is_a_declared_capability_and_off_is_the_plain_cache():
    assert isinstance(tier_engine(tokens=4096).loop.scheduler.cache, HostTier)
    plain = tier_engine(tokens=0).loop.scheduler.cache
    assert not isinstance(plain, HostTier) and type(plain).__name__ == "ApcCache"
