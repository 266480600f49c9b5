"""apc's storage tier, vLLM 0.33's file-system tier behind the CPU tier (engines/cache/apc/
storage_store.py; docs/tiers.md §10.1), on hand-made streams, one request at a time: what reaches
storage, the lookup past the CPU tier, promotion into the CPU tier, the steps a storage hit
waits, chunk granularity, the last-token clamp, what a reset keeps, and off being today."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engines.cache.apc import StorageTieredApcCache, TieredApcCache
from engines.cache.records import Allocation
from engines.cache.storage_tier import StorageTier, StorageTierConfig
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.errors import BadInput
from engines.request import GenerationRequest
from engines.sequence import Sequence
from tests.apc_storage_streams import OUT, per_tier, resend, storage_engine, tail_evicted
from tests.engine_util import make_engine
from tests.tier_streams import Prompts, send


def run(stream, engine) -> dict[str, tuple[int, int, int]]:
    return {rid: per_tier(send(engine, rid, prompt, output)) for rid, prompt, output in stream}


def test_a_resent_prompt_after_device_and_cpu_eviction_hits_storage():
    got = run(resend(), storage_engine(tokens=640))
    assert got["a2"] == (0, 0, 288)  # 18 complete chunks come back from storage
    assert all(got[rid] == (0, 0, 0) for rid in got if rid != "a2")
    assert run(resend(), storage_engine(tokens=640, storage=False))["a2"] == (0, 0, 0)


def test_every_chunk_stored_to_the_cpu_tier_reaches_storage_and_none_leaves():
    engine = storage_engine(tokens=640)
    run(resend(), engine)
    cache = engine.loop.scheduler.cache
    assert isinstance(cache, StorageTier)
    stats, host = cache.storage_stats(), cache.host_stats()
    assert stats.stored == host.stored == 5 * 288  # a2 loads its chunks: none stored again
    assert stats.evicted == 0
    assert stats.hits == stats.loaded == 288
    assert stats.queries == 6 * 300  # nothing held on the device or in the CPU tier


def test_storage_hits_in_whole_chunks():
    got = run(resend(), storage_engine(tokens=640, blocks_per_chunk=4))
    assert got["a2"] == (0, 0, 256)  # 4 chunks of 64: the incomplete fifth is never stored


def test_a_whole_prompt_storage_hit_computes_the_last_token_again():
    engine = storage_engine(tokens=640)
    got = run(resend(length=320), engine)
    assert got["a2"] == (0, 0, 320)


def test_a_storage_hit_waits_one_step_for_the_answer_and_one_for_the_promotion():
    """The first lookup asks storage (try later); the next reads the answer and promotes; the
    one after finds the chunks in the CPU tier and loads them: the request is admitted at the
    third lookup."""
    engine = storage_engine(tokens=640)
    stream = resend()
    run(stream[:-1], engine)
    cache = engine.loop.scheduler.cache
    assert isinstance(cache, TieredApcCache) and cache.storage is not None
    prompt = list(stream[-1][1])
    a2 = Sequence("a2", prompt, num_prompt_tokens=len(prompt), max_new_tokens=1)
    assert cache.host_lookup(a2, 0) is None  # asked: try later
    cache.host_after_schedule([])
    cache.host_after_step([])
    assert cache.host_lookup(a2, 0) is None  # found: promoted into the CPU tier, being read
    assert len(cache.store.pending) == 18
    cache.host_after_schedule([])
    cache.host_after_step([])
    assert cache.host_lookup(a2, 0) == 288  # in the CPU tier now: a CPU hit


def test_promotions_of_a_plan_that_offers_a_store_are_seen_a_step_later():
    """vLLM's manager polls finished reads once a step, at its first call after a plan's end: a
    store offered in the plan that promotes takes that poll, so the next step's lookup still
    waits and the chunks are readable one step later."""
    engine = storage_engine(tokens=640)
    stream = resend()
    run(stream[:-1], engine)
    cache = engine.loop.scheduler.cache
    assert isinstance(cache, TieredApcCache)
    prompt = list(stream[-1][1])
    a2 = Sequence("a2", prompt, num_prompt_tokens=len(prompt), max_new_tokens=1)
    other = Sequence("o", list(range(5, 69)), num_prompt_tokens=64, max_new_tokens=1)
    assert cache.host_lookup(a2, 0) is None  # asked
    cache.host_after_schedule([])
    cache.host_after_step([])
    assert cache.host_lookup(a2, 0) is None  # promoted
    assert cache.allocate([Allocation(other, 64)])
    cache.host_after_schedule([(other, 64)])  # the same plan offers `other`'s chunks
    cache.host_after_step([])
    assert cache.host_lookup(a2, 0) is None  # the reads are not seen yet
    cache.host_after_schedule([])
    cache.host_after_step([])
    assert cache.host_lookup(a2, 0) == 288


def test_promotion_evicts_in_the_cpu_tier_and_can_evict_the_prompts_own_head():
    """LRU keeps a finished request's head most recent, so the fillers evict the prompt's tail
    from the CPU tier; promoting the tail then evicts the oldest CPU chunks, which are the same
    prompt's head, and the next lookup finds those in storage too: all of it comes from
    storage (vLLM's tiering manager gives the same)."""
    got = run(tail_evicted(), storage_engine(320, tokens=640))
    assert got["a2"] == (0, 0, 288)


def test_a_reset_clears_the_cpu_tier_and_keeps_storage():
    prompts = Prompts()
    engine = storage_engine(tokens=4096)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    cache = engine.loop.scheduler.cache
    assert cache.reset()
    assert per_tier(send(engine, "a2", a, OUT)) == (0, 0, 288)  # files survive a reset
    assert cache.storage_stats().hits == 288  # the counters restart at the reset


def test_storage_off_is_the_cpu_tier_alone():
    plain = storage_engine(tokens=640, storage=False).loop.scheduler.cache
    assert type(plain) is TieredApcCache and not isinstance(plain, StorageTier)
    tiered = storage_engine(tokens=640).loop.scheduler.cache
    assert type(tiered) is StorageTieredApcCache and isinstance(tiered, StorageTier)


@pytest.mark.parametrize(
    ("tier", "needle"),
    [
        (HostTierConfig(), "engine.storage_tier needs a host tier"),
        (HostTierConfig(tokens=4096, store_threshold=2), "store_threshold 1"),
    ],
)
def test_a_storage_tier_vllm_refuses_is_refused(tier, needle):
    cfg = EngineConfig(cache="apc", host_tier=tier, storage_tier=StorageTierConfig(enabled=True))
    with pytest.raises(BadInput, match=needle):
        cfg.validate()


def serve(engine, stream: list[tuple[str, tuple[int, ...]]]):
    """Each request alone to its finish (greedy), then the engine idles; records by id and the
    first-token logits."""
    engine.executor.first_logits = {}
    for rid, prompt in stream:
        req = GenerationRequest(request_id=rid, prompt_ids=prompt, max_new_tokens=6)
        engine.add_request(req, engine.clock.now())
        while engine.has_work:
            engine.step()
        engine.idle()
    return {r.request_id: r for r in engine.records}, engine.executor.first_logits


def test_a_storage_hit_loads_real_kv_and_decodes_as_caching_off():
    """The real executor writes each stored chunk's K/V to storage and reads a promoted chunk
    back into the host pool before the device loads it (engines/host_pool.py): the re-sent
    prompt decodes as with caching off."""
    rng = np.random.default_rng(0)
    a, *fillers = (tuple(rng.integers(1, 1000, 100).tolist()) for _ in range(6))
    stream = [("a1", a)] + [(f"f{i}", p) for i, p in enumerate(fillers)] + [("a2", a)]
    # 160 device tokens and 192 CPU tokens: the fillers push `a` out of both
    tiered = make_engine(
        "apc",
        block_size=16,
        kv_capacity_tokens=160,
        host_tier=HostTierConfig(tokens=192),
        storage_tier=StorageTierConfig(enabled=True),
    )
    records, logits = serve(tiered, stream)
    off = make_engine("apc", block_size=16, kv_capacity_tokens=160, prefix_caching=False)
    ref_records, ref_logits = serve(off, [("a2", a)])
    hit = records["a2"]
    assert per_tier(hit) == (0, 0, 96)
    assert hit.output_ids == ref_records["a2"].output_ids == records["a1"].output_ids
    torch.testing.assert_close(logits["a2"], ref_logits["a2"], rtol=1e-4, atol=1e-4)
