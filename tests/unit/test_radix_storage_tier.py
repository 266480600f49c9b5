"""SGLang HiCache's storage tier (L3) behind radix's host tier, one rule per test, on hand-made
streams of 300-token prompts at page 1 over 640 device tokens and a 1,000-token host pool, so
eight fillers push a prompt off the device and then out of the host pool (docs/tiers.md §10.2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engines.build import build_engine
from engines.cache.radix import StorageRadixCache, TieredRadixCache
from engines.cache.storage_tier import StorageTier, StorageTierConfig
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from engines.request import GenerationRequest
from tests.engine_util import make_engine
from tests.tier_streams import TICKS, Prompts, send, send_together

OUT = (101, 102, 103, 104)


def engine_with(host: int = 1000, write_policy: str = "write_through", seqs: int = 256, **st: Any):
    cfg = EngineConfig(
        cache="radix",
        block_size=1,
        kv_capacity_tokens=640,
        max_num_batched_tokens=512,
        max_num_seqs=seqs,
        backend="torch",
        host_tier=HostTierConfig(tokens=host, write_policy=write_policy),
        storage_tier=StorageTierConfig(enabled=True, **st),
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=TICKS
    )


def tiers3(rec: RequestRecord) -> tuple[int, int, int]:
    """(device, host, storage) cached tokens of a record."""
    host, storage = rec.host_cached_tokens, rec.storage_cached_tokens
    return rec.cached_tokens - host - storage, host, storage


def fill(engine, prompts: Prompts, n: int = 8, tag: str = "f") -> None:
    for i in range(n):
        send(engine, f"{tag}{i}", prompts.tokens(300), OUT)


def cache_of(engine) -> StorageRadixCache:
    cache = engine.loop.scheduler.cache
    assert isinstance(cache, StorageRadixCache)
    return cache


def test_the_storage_tier_is_a_declared_capability_and_off_is_the_host_tiered_cache():
    cache = cache_of(engine_with())
    assert isinstance(cache, StorageTier)
    cfg = EngineConfig(cache="radix", block_size=1, kv_capacity_tokens=640)
    cfg.host_tier = HostTierConfig(tokens=1000)
    cfg.validate()
    plain = build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=TICKS
    )
    off = plain.loop.scheduler.cache
    assert type(off) is TieredRadixCache and not isinstance(off, StorageTier)


@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_a_prompt_gone_from_device_and_host_comes_back_from_storage(policy):
    prompts = Prompts()
    engine = engine_with(prefetch_policy=policy)
    a = prompts.tokens(300)
    assert tiers3(send(engine, "a1", a, OUT)) == (0, 0, 0)
    fill(engine, prompts)
    assert cache_of(engine).host_stats().evicted > 0  # a's pages left the host pool too
    assert tiers3(send(engine, "a2", a, OUT)) == (0, 0, 299)
    # the prefetched pages entered the host pool and loaded back: a third send is a device hit
    assert tiers3(send(engine, "a3", a, OUT)) == (299, 0, 0)


def test_best_effort_takes_nothing_when_the_request_is_admitted_as_it_arrives():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="best_effort")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    assert tiers3(send(engine, "a2", a, OUT)) == (0, 0, 0)
    assert cache_of(engine).storage_stats().loaded == 0


def test_best_effort_takes_the_whole_prefetch_of_a_request_that_waited_an_iteration():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="best_effort", seqs=1)  # one request runs at a time
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    b, a2 = send_together(engine, [("b", prompts.tokens(300), OUT), ("a2", a, OUT)])
    assert tiers3(b) == (0, 0, 0)
    assert tiers3(a2) == (0, 0, 299)  # queued behind b: its prefetch completed meanwhile


def test_wait_complete_admits_a_later_request_while_one_waits_for_its_prefetch():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    a2, b = send_together(engine, [("a2", a, OUT), ("b", prompts.tokens(40), OUT)])
    assert tiers3(a2) == (0, 0, 299)
    assert b.scheduled_s < a2.scheduled_s  # upstream skips a waiting request, not the queue


@pytest.mark.parametrize(("length", "expected"), [(256, 0), (257, 256)])
def test_a_storage_hit_under_the_prefetch_threshold_is_not_fetched(length, expected):
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete")  # threshold 256, upstream's default
    a = prompts.tokens(length)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    # the span past device + host is the prompt less its last token: 255, then 256 tokens
    assert tiers3(send(engine, "a2", a, OUT)) == (0, 0, expected)


def test_a_lower_threshold_fetches_a_short_hit():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete", prefetch_threshold=0)
    a = prompts.tokens(40)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    assert tiers3(send(engine, "a2", a, OUT)) == (0, 0, 39)


@pytest.mark.parametrize(
    ("write_policy", "after_one", "after_two", "a3"),
    [
        ("write_through", 303, 303, (0, 0, 299)),
        ("write_through_selective", 0, 303, (0, 299, 0)),  # fillers never fill the host pool
        ("write_back", 0, 0, (0, 0, 299)),
    ],
)
def test_pages_reach_storage_after_their_host_write(write_policy, after_one, after_two, a3):
    """Storage backs up what the host pool was written: on insert (write_through), on the
    second insert (selective), on device eviction (write_back)."""
    prompts = Prompts()
    engine = engine_with(write_policy=write_policy, prefetch_policy="wait_complete")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    cache = cache_of(engine)
    assert cache.storage_stats().stored == after_one
    send(engine, "a2", a, OUT)  # a device hit; its insert is a's second
    assert cache.storage_stats().stored == after_two
    fill(engine, prompts, n=2)  # 600 more tokens: a leaves the device
    if write_policy == "write_back":
        assert cache.storage_stats().stored == cache.host_stats().stored > 0
    fill(engine, prompts, n=6, tag="g")  # and the host pool
    assert tiers3(send(engine, "a3", a, OUT)) == a3


def test_a_conversation_turn_takes_its_history_from_storage():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete")
    turn1 = prompts.tokens(300)
    send(engine, "t1", turn1, OUT)
    fill(engine, prompts)
    turn2 = turn1 + OUT + prompts.tokens(30)
    # turn 1's insert covered its prompt and three of its four outputs (the last is not KV yet)
    assert tiers3(send(engine, "t2", turn2, OUT)) == (0, 0, 303)


def test_the_counters():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    cache = cache_of(engine)
    first = cache.storage_stats()
    # a1's arrival asked storage for its 299-token span and found nothing; its insert wrote 303
    assert (first.queries, first.hits, first.stored, first.loaded) == (299, 0, 303, 0)
    fill(engine, prompts)
    before = cache.storage_stats()
    send(engine, "a2", a, OUT)
    after = cache.storage_stats()
    assert after.queries - before.queries == 299  # a2's span past device + host (nothing)
    assert after.hits - before.hits == 299
    assert after.loaded - before.loaded == 299
    assert after.evicted == 0  # unbounded


def test_a_flush_keeps_storage_but_drops_the_host_pool():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="wait_complete")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    assert cache_of(engine).reset()
    assert tiers3(send(engine, "a2", a, OUT)) == (0, 0, 299)


def test_the_real_executor_moves_real_kv_through_storage():
    """A prompt gone from device and host comes back from storage with its real K/V
    (engines/host_pool.py keeps the storage copies): it decodes as caching off does."""
    rng = np.random.default_rng(3)
    a, *fillers = (tuple(rng.integers(1, 1000, 100).tolist()) for _ in range(8))
    real = make_engine(
        "radix",
        block_size=1,
        kv_capacity_tokens=160,
        host_tier=HostTierConfig(tokens=256),
        storage_tier=StorageTierConfig(
            enabled=True, prefetch_policy="wait_complete", prefetch_threshold=64
        ),
    )
    stream = [("a1", a)] + [(f"f{i}", p) for i, p in enumerate(fillers)] + [("a2", a)]
    records = greedy(real, stream)
    off = greedy(
        make_engine("radix", block_size=1, kv_capacity_tokens=160, prefix_caching=False),
        [("a2", a)],
    )
    hit = records["a2"]
    assert hit.storage_cached_tokens == hit.cached_tokens == 99
    assert hit.output_ids == off["a2"].output_ids == records["a1"].output_ids
    assert len(real.executor.host_pool.storage) > 0


def greedy(engine, stream):
    """Each request alone to its finish (greedy), then the engine idles; records by id."""
    for rid, prompt in stream:
        req = GenerationRequest(request_id=rid, prompt_ids=prompt, max_new_tokens=6)
        engine.add_request(req, engine.clock.now())
        while engine.has_work:
            engine.step()
        engine.idle()
    return {r.request_id: r for r in engine.records}


@pytest.mark.parametrize(("write_policy", "expected"), [("write_through", 399), ("write_back", 0)])
def test_storage_continues_a_device_hit_only_from_a_page_the_host_pool_holds(
    write_policy, expected
):
    """Upstream anchors a prefetch on the match's last node and issues it only when that node is
    backed up to the host (or is the root): under write_back a device head is not."""
    prompts = Prompts()
    engine = engine_with(write_policy=write_policy, prefetch_policy="wait_complete")
    e = prompts.tokens(500)
    send(engine, "e1", e, OUT)
    fill(engine, prompts)
    send(engine, "e-head", e[:100] + prompts.tokens(50), OUT)  # the head back on the device
    assert tiers3(send(engine, "e2", e, OUT)) == (100, 0, expected)


def test_storage_continues_a_host_hit():
    prompts = Prompts()
    engine = engine_with(host=1281, prefetch_policy="wait_complete")  # room for the whole hit
    f = prompts.tokens(500)
    send(engine, "p1", f, OUT)
    fill(engine, prompts)
    send(engine, "p-head", f[:100] + prompts.tokens(50), OUT)
    fill(engine, prompts, n=2, tag="g")  # the head leaves the device, its host copy stays
    assert tiers3(send(engine, "p2", f, OUT)) == (0, 100, 399)


def test_a_prefetch_completes_at_the_next_iteration_even_inside_a_decode_stretch():
    prompts = Prompts()
    engine = engine_with(prefetch_policy="best_effort", seqs=1)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    cache = cache_of(engine)
    now = engine.clock.now()
    long_out = tuple(range(200, 240))
    engine.add_request(
        GenerationRequest("b", prompts.tokens(40), len(long_out), scripted_output_ids=long_out),
        now,
    )
    engine.step()  # b's prefill; it decodes 39 more steps, one request at a time
    engine.add_request(GenerationRequest("a2", a, len(OUT), scripted_output_ids=OUT), now)
    engine.step()  # a2 arrives: its prefetch is issued; b decodes
    assert cache.storage_stats().loaded == 0
    engine.step()  # the next iteration drains it, not the end of b's decode stretch
    assert cache.storage_stats().loaded == 299
    while engine.has_work:
        engine.step()
    rec = next(r for r in engine.records if r.request_id == "a2")
    assert tiers3(rec) == (0, 0, 299)


@pytest.mark.parametrize(
    ("policy", "same_batch"), [("wait_complete", False), ("best_effort", True)]
)
def test_a_storage_miss_still_waits_for_its_hit_query(policy, same_batch):
    """A span at or over the threshold is a prefetch in flight until the next iteration even when
    storage holds none of it; a shorter one asks nothing and is admitted at once."""
    prompts = Prompts()
    engine = engine_with(prefetch_policy=policy)
    long, short = send_together(
        engine, [("long", prompts.tokens(300), OUT), ("short", prompts.tokens(40), OUT)]
    )
    assert tiers3(long) == tiers3(short) == (0, 0, 0)
    if same_batch:  # best_effort stops the query at once: one batch for both
        assert long.scheduled_s == short.scheduled_s
    else:
        assert short.scheduled_s < long.scheduled_s
