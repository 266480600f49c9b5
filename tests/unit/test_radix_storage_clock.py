"""radix's storage prefetch on the storage link's clock (docs/tiers.md §10.2, §10.3): with a priced
link the pages land in order as the link reads them, and admission takes what has landed by the
iteration's time under each prefetch policy. Hand-made streams of 300-token prompts at page 1 over
640 device tokens and a 1,000-token host pool, on a preset of 256 KV bytes a token with a 1 MB/s
host link; the storage link's bandwidth varies (1e5 B/s reads a token in 2.56 ms)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engines.build import build_engine
from engines.cache.storage_prefetch import ReadTiming
from engines.cache.storage_tier import StorageTierConfig
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from engines.storage_link import StorageLinkPricing
from tests.tier_streams import BYTES_PER_TOKEN, STORAGE_PRICED, Prompts, send, send_together

OUT = (101, 102, 103, 104)
HOST_BW = STORAGE_PRICED.host_link_bandwidth


def engine_with(bandwidth: float, seqs: int = 256, host: int = 1000, **st: Any):
    cfg = EngineConfig(
        cache="radix",
        block_size=1,
        kv_capacity_tokens=640,
        max_num_batched_tokens=512,
        max_num_seqs=seqs,
        backend="torch",
        host_tier=HostTierConfig(tokens=host),
        storage_tier=StorageTierConfig(enabled=True, **st),
    )
    cfg.validate()
    hardware = replace(STORAGE_PRICED, storage_bandwidth=bandwidth)
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=hardware
    )


def tiers3(rec: RequestRecord) -> tuple[int, int, int]:
    host, storage = rec.host_cached_tokens, rec.storage_cached_tokens
    return rec.cached_tokens - host - storage, host, storage


def ttft(rec: RequestRecord) -> float:
    return rec.first_token_s - rec.arrival_s


def read_s(engine) -> float:
    return engine.executor.host_link.storage.figures().read_s


def token_s(bandwidth: float) -> float:
    return BYTES_PER_TOKEN / bandwidth


def gone(engine, prompts: Prompts) -> tuple[tuple[int, ...], RequestRecord]:
    """A 300-token prompt sent once, then pushed off the device and out of the host pool by eight
    fillers (storage keeps it); the prompt and its first record (a cold prefill)."""
    a = prompts.tokens(300)
    first = send(engine, "a1", a, OUT)
    for i in range(8):
        send(engine, f"f{i}", prompts.tokens(300), OUT)
    return a, first


def resent_alone(bandwidth: float, **st: Any) -> tuple[Any, RequestRecord, RequestRecord]:
    """The prompt re-sent alone to an idle engine: (engine, its cold record, the re-send's)."""
    engine = engine_with(bandwidth, **st)
    a, cold = gone(engine, Prompts())
    return engine, cold, send(engine, "a2", a, OUT)


def test_wait_complete_idles_the_engine_until_the_read_has_landed_every_page():
    waits = []
    for bandwidth in (1e5, 5e4):
        engine, _, a2 = resent_alone(bandwidth, prefetch_policy="wait_complete")
        assert tiers3(a2) == (0, 0, 299)
        fig = engine.executor.host_link.storage.figures()
        assert fig.read_s == pytest.approx(299 * token_s(bandwidth))
        assert fig.read_stall_s == 0  # the request waited in the queue, no step did
        # admitted when the read ended: the engine idled on the read's clock, nothing else
        assert a2.scheduled_s - a2.arrival_s == pytest.approx(fig.read_s)
        waits.append(ttft(a2))
    assert waits[1] - waits[0] == pytest.approx(299 * (token_s(5e4) - token_s(1e5)))


def test_timeout_cuts_a_slow_read_at_its_deadline_and_takes_what_landed():
    deadline = 0.2  # base 0.2 s, nothing per token: well before the 0.77 s read ends
    engine, cold, a2 = resent_alone(
        1e5,
        prefetch_policy="timeout",
        prefetch_timeout_base=deadline,
        prefetch_timeout_per_ki_token=0.0,
    )
    landed = a2.storage_cached_tokens
    assert tiers3(a2) == (0, 0, landed)
    assert landed == int(deadline / token_s(1e5))  # the pages read by the deadline
    assert a2.scheduled_s - a2.arrival_s == pytest.approx(deadline)
    # bounded by the deadline and one prefill: the cold prompt's plus loading what landed
    assert ttft(a2) <= deadline + ttft(cold) + landed * BYTES_PER_TOKEN / HOST_BW + 1e-9
    # the link stopped after the page in progress: the rest of the read was never paid for
    assert read_s(engine) == pytest.approx((landed + 1) * token_s(1e5))


def test_timeout_waits_for_a_read_that_ends_before_its_deadline():
    # upstream's default deadline: 1 s + 0.25 s per 1,024 tokens (1.07 s for 299 tokens)
    fast_engine, _, fast = resent_alone(1e5, prefetch_policy="timeout")  # a 0.77 s read
    assert tiers3(fast) == (0, 0, 299)
    assert fast.scheduled_s - fast.arrival_s == pytest.approx(read_s(fast_engine))
    _, _, slow = resent_alone(5e4, prefetch_policy="timeout")  # 1.53 s: cut at 1.07 s
    deadline = 1.0 + 0.25 * 299 / 1024
    assert slow.scheduled_s - slow.arrival_s == pytest.approx(deadline)
    assert slow.storage_cached_tokens == int(deadline / token_s(5e4))


def test_best_effort_alone_takes_nothing_and_reads_nothing():
    engine, cold, a2 = resent_alone(1e5, prefetch_policy="best_effort")
    assert tiers3(a2) == (0, 0, 0)  # stopped at its first poll, as it arrived
    assert ttft(a2) == pytest.approx(ttft(cold))
    assert read_s(engine) == 0


def best_effort_behind(bandwidth: float, decodes: int) -> RequestRecord:
    """The prompt re-sent behind a request that decodes `decodes` tokens, one request running at
    a time: it is polled only once that request finished, its read landing meanwhile."""
    engine = engine_with(bandwidth, seqs=1, prefetch_policy="best_effort")
    prompts = Prompts()
    a, _ = gone(engine, prompts)
    long_out = tuple(range(200, 200 + decodes))
    b, a2 = send_together(engine, [("b", prompts.tokens(40), long_out), ("a2", a, OUT)])
    assert tiers3(b) == (0, 0, 0)
    return a2


def test_best_effort_takes_the_landed_prefix_which_grows_with_the_wait_and_the_bandwidth():
    taken = {}
    for bandwidth in (5e4, 1e5):
        for decodes in (20, 40):
            a2 = best_effort_behind(bandwidth, decodes)
            landed = a2.storage_cached_tokens
            assert tiers3(a2) == (0, 0, landed)  # a prefix of the span, all from storage
            waited = a2.scheduled_s - a2.arrival_s
            # the read starts at the iteration after the arrival (upstream allocates the hit's
            # host pages then), so at most the whole wait's worth has landed
            assert 0 < landed <= waited / token_s(bandwidth) < 299
            taken[bandwidth, decodes] = landed
    assert taken[5e4, 20] < taken[5e4, 40] and taken[1e5, 20] < taken[1e5, 40]
    assert taken[5e4, 20] < taken[1e5, 20] and taken[5e4, 40] < taken[1e5, 40]
    assert tiers3(best_effort_behind(1e6, 20)) == (0, 0, 299)  # a fast drive: all of it


@pytest.mark.parametrize(
    ("host", "head_on_device", "expected"),
    [(1000, True, (100, 0, 399)), (1281, False, (0, 100, 399))],
)
def test_the_split_still_adds_up_on_the_reads_clock(host, head_on_device, expected):
    """A 500-token prompt whose first 100 tokens are back on the device, or in the host pool,
    and the rest in storage: device + host + storage = cached, as without a priced link."""
    prompts = Prompts()
    engine = engine_with(1e5, host=host, prefetch_policy="wait_complete")
    x = prompts.tokens(500)
    send(engine, "x1", x, OUT)
    for i in range(8):
        send(engine, f"f{i}", prompts.tokens(300), OUT)
    send(engine, "x-head", x[:100] + prompts.tokens(50), OUT)
    if not head_on_device:  # the head leaves the device, its host copy stays
        for i in range(2):
            send(engine, f"g{i}", prompts.tokens(300), OUT)
    x2 = send(engine, "x2", x, OUT)
    assert tiers3(x2) == expected
    assert sum(tiers3(x2)) == x2.cached_tokens


def test_a_partial_take_after_a_host_hit_splits_three_ways():
    prompts = Prompts()
    engine = engine_with(1e5, seqs=1, host=1281, prefetch_policy="best_effort")
    x = prompts.tokens(500)
    send(engine, "x1", x, OUT)
    for i in range(8):
        send(engine, f"f{i}", prompts.tokens(300), OUT)
    send(engine, "x-head", x[:100] + prompts.tokens(50), OUT)
    for i in range(2):
        send(engine, f"g{i}", prompts.tokens(300), OUT)
    loaded = engine.loop.scheduler.cache.storage_stats().loaded
    long_out = tuple(range(200, 240))
    _, x2 = send_together(engine, [("b", prompts.tokens(40), long_out), ("x2", x, OUT)])
    device, host, storage = tiers3(x2)
    assert (device, host) == (0, 100) and 0 < storage < 399
    assert x2.cached_tokens == host + storage
    assert engine.loop.scheduler.cache.storage_stats().loaded - loaded == storage


def test_a_read_cut_short_frees_the_link_and_the_next_read_moves_up():
    link = StorageLinkPricing(100.0, 1.0)  # 100 tokens a second
    link.timed = True
    link.queue(0.0, [("a", 100), ("b", 100)], [])
    assert link.take_timings() == {"a": ReadTiming(0.0, 1.0, 100), "b": ReadTiming(1.0, 2.0, 100)}
    link.queue(0.5, [], [], ends=[("a", 50)])  # a stopped after 50 tokens
    assert link.take_timings() == {"b": ReadTiming(0.5, 1.5, 100)}
    fig = link.figures()
    assert (fig.read_bytes, fig.read_s) == (150, 1.5)
    assert link.wait("a", 0.5) == 0  # nothing waits for an ended read


def test_a_read_lands_its_tokens_in_order_at_a_constant_rate():
    timing = ReadTiming(1.0, 2.0, 100)
    assert [timing.tokens_done(t) for t in (0.5, 1.0, 1.255, 1.999, 2.0, 3.0)] == [
        0,
        0,
        25,
        99,
        100,
        100,
    ]
