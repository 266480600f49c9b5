"""SGLang's HiCache host tier behind radix, one rule per test, on hand-made streams of 300-token
prompts over 640 device tokens at page 1 (docs/tiers.md §3)."""

from __future__ import annotations

import pytest

from engines.cache.radix.host_pages import HostPages
from engines.cache.tiers import HostTier, TransferLog
from tests.tier_streams import Prompts, send, send_together, tier_engine, tiers

OUT = (101, 102, 103, 104)


def fill(engine, prompts: Prompts, n: int = 3, tag: str = "f") -> None:
    for i in range(n):
        send(engine, f"{tag}{i}", prompts.tokens(300), OUT)


@pytest.mark.parametrize(
    ("write_policy", "expected"),
    [("write_through", (0, 299)), ("write_back", (0, 299)), ("write_through_selective", (0, 0))],
)
def test_a_prompt_seen_once_then_evicted_from_the_device(write_policy, expected):
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, write_policy=write_policy)
    a = prompts.tokens(300)
    assert tiers(send(engine, "a1", a, OUT)) == (0, 0)
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == expected  # one walk: device 0, then host pages


def test_write_through_selective_writes_a_page_inserted_twice():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, write_policy="write_through_selective")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    assert tiers(send(engine, "a2", a, OUT)) == (299, 0)  # a device hit; its insert is the 2nd
    fill(engine, prompts)
    assert tiers(send(engine, "a3", a, OUT)) == (0, 299)


def test_write_back_writes_only_on_device_eviction():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, write_policy="write_back")
    cache = engine.loop.scheduler.cache
    send(engine, "a1", prompts.tokens(300), OUT)
    assert cache.host_stats().stored == 0  # still on the device: nothing written
    send(engine, "b1", prompts.tokens(300), OUT)
    send(engine, "c1", prompts.tokens(300), OUT)
    evicted = cache.stats().evicted_tokens
    assert evicted > 0 and cache.host_stats().stored == evicted


def test_a_host_hit_below_the_load_back_threshold_is_not_loaded():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, load_back_threshold=300)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 0)  # 299 host tokens < 300


def test_the_host_pool_drops_its_least_recently_used_pages():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=600)  # two prompts' worth of pages
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)  # three more prompts written: a's pages are the oldest
    assert tiers(send(engine, "a2", a, OUT)) == (0, 0)
    assert engine.loop.scheduler.cache.host_stats().evicted > 0


def test_a_flush_clears_the_host_pool():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096)
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    assert engine.loop.scheduler.cache.reset()
    fill(engine, prompts)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 0)


def test_the_tier_is_a_declared_capability_and_off_is_the_plain_cache():
    assert isinstance(tier_engine("radix", tokens=4096).loop.scheduler.cache, HostTier)
    plain = tier_engine("radix", tokens=0).loop.scheduler.cache
    assert not isinstance(plain, HostTier) and type(plain).__name__ == "RadixCache"


def test_a_full_host_pool_keeps_the_copies_of_pages_still_on_the_device():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=300)  # one prompt's worth of pages
    cache = engine.loop.scheduler.cache
    send(engine, "a1", prompts.tokens(300), OUT)
    assert cache.host_stats().stored == 300  # the pool is full; a's pages are still on the device
    send(engine, "b1", prompts.tokens(300), OUT)
    stats = cache.host_stats()  # no host leaf to drop: b's write fails, as upstream's backup does
    assert (stats.stored, stats.evicted) == (300, 0)


def test_a_host_hit_survives_its_own_admissions_write_back():
    prompts = Prompts()
    engine = tier_engine("radix", tokens=300, write_policy="write_back")
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    fill(engine, prompts, n=2)  # the second filler evicts a: its pages fill the host pool
    # a2's admission evicts the first filler, whose write-back finds only a's pages to drop:
    # they are a2's hit, held until loaded (upstream's load-back locks its host node)
    assert tiers(send(engine, "a2", a, OUT)) == (0, 299)


@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
def test_a_loaded_head_keeps_its_node_bounds_on_the_device(write_policy):
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, write_policy=write_policy)
    a = prompts.tokens(200)
    send(engine, "a1", a, OUT)
    fill(engine, prompts)  # a leaves the device
    assert tiers(send(engine, "a2", a + prompts.tokens(200), OUT)) == (0, 200)  # a loaded back
    # the loaded head stays a node of its own (upstream's load-back revives a's node): b's
    # admission evicts a2's tail and not the head, where one leaf would lose both
    send(engine, "b", prompts.tokens(350), OUT)
    assert tiers(send(engine, "a3", a + prompts.tokens(50), OUT)) == (200, 0)


@pytest.mark.parametrize("write_policy", ["write_through", "write_back"])
def test_a_load_back_is_on_the_device_for_the_next_request_of_its_batch(write_policy):
    prompts = Prompts()
    engine = tier_engine("radix", tokens=4096, write_policy=write_policy)
    head = prompts.tokens(200)
    send(engine, "a", head + prompts.tokens(20), OUT)
    fill(engine, prompts)  # the head leaves the device
    x, y = head + prompts.tokens(20), head + prompts.tokens(30)
    # upstream loads x's hit back while it forms the batch (init_load_back in add_one_req) and
    # re-matches y after that: y finds the head on the device
    got = send_together(engine, [("x", x, OUT), ("y", y, OUT)])
    assert [tiers(r) for r in got] == [(0, 200), (200, 0)]


def test_a_host_hit_ending_inside_a_run_leaves_the_rest_most_recent():
    pages = HostPages(10, False, TransferLog())
    a, b = [1, 2, 3, 4, 5], [11, 12, 13, 14, 15]
    for run in (a, b):  # two prompts written, then evicted from the device: a first
        pages.on_device(run, 0)
        pages.write(run, None, [])
        pages.off_device(run, 0)
    pages.split_after(3)  # a lookup hit a's first three pages: upstream splits a's node there
    pages.write([21], None, [])  # the pool is full: one host leaf's run goes, least recent first
    assert {4, 5} <= set(pages.held) and not set(b) & set(pages.held)
