"""A storage tier's transfers priced in time (engines/storage_link.py, docs/tiers.md §10.3): bytes
are tokens x KV bytes per token each way, a load waits for its storage read, writes never delay a
step, and a preset without `storage_bandwidth` counts the bytes and prices nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engines.build import build_engine
from engines.cache.storage_tier import StorageTierConfig
from engines.cache.tiers import LOAD_BEFORE_STEP, LOAD_LAYERWISE, HostTierConfig, Transfers
from engines.config import EngineConfig
from engines.host_link import HostLinkPricing
from engines.model.presets import PRESETS
from engines.sequence import Sequence
from engines.storage_link import StorageLinkPricing
from tests.apc_storage_streams import per_tier, resend
from tests.tier_streams import BYTES_PER_TOKEN, Prompts, send
from tests.tier_streams import STORAGE_PRICED as LINK

OUT = (101, 102, 103, 104)


def test_a_load_waits_for_its_storage_read_and_writes_only_queue():
    storage = StorageLinkPricing(100.0, 2.0)
    link = HostLinkPricing(100.0, 2.0, LOAD_BEFORE_STEP, num_layers=4, storage=storage)
    # the read (200 bytes: 2 s) and a write (100 bytes: 1 s) start with this 1 s step
    assert link.step(0.0, 1.0, Transfers([], [], (("a", 100),), (50,))) == 1.0
    a = Sequence("a", [1, 2, 3], 3, 4)
    # the load could start at 1.5 s, the read ends at 2 s: 0.5 s wait + 2 s load + 1 s compute
    assert link.step(1.5, 1.0, Transfers([(a, 100)], [])) == 3.5
    fig = storage.figures()
    assert (fig.read_bytes, fig.write_bytes) == (200, 100)
    assert (fig.read_s, fig.write_s, fig.read_stall_s) == (2.0, 1.0, 0.5)
    assert fig.max_write_backlog_s == 1.0
    assert link.figures().load_stall_s == 2.0  # the host link's own part excludes the wait


def test_a_layerwise_load_starts_its_pipeline_after_the_read():
    storage = StorageLinkPricing(100.0, 2.0)
    link = HostLinkPricing(100.0, 2.0, LOAD_LAYERWISE, num_layers=4, storage=storage)
    a = Sequence("a", [1, 2, 3], 3, 4)
    # read 2 s from 0; the layer pipeline (8 s compute, 2 s load) takes 8.5 s after it
    assert link.step(0.0, 8.0, Transfers([(a, 100)], [], (("a", 100),))) == 10.5


def apc_engine(hardware):
    cfg = EngineConfig(
        cache="apc",
        block_size=16,
        kv_capacity_tokens=640,
        max_num_batched_tokens=512,
        backend="torch",
        host_tier=HostTierConfig(tokens=640),
        storage_tier=StorageTierConfig(enabled=True),
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=hardware
    )


def radix_engine(hardware):
    cfg = EngineConfig(
        cache="radix",
        block_size=1,
        kv_capacity_tokens=640,
        max_num_batched_tokens=512,
        backend="torch",
        host_tier=HostTierConfig(tokens=1000),
        storage_tier=StorageTierConfig(enabled=True, prefetch_policy="wait_complete"),
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=hardware
    )


def apc_run(bandwidth: float | None):
    """The resent prompt comes back from storage: 18 chunks of 16 tokens (the rules' test)."""
    engine = apc_engine(replace(LINK, storage_bandwidth=bandwidth))
    recs = {rid: send(engine, rid, p, o) for rid, p, o in resend()}
    assert per_tier(recs["a2"]) == (0, 0, 288)
    return engine, recs["a2"]


def radix_run(bandwidth: float | None):
    """A prompt pushed off the device and out of the host pool is prefetched whole (299 pages)."""
    engine = radix_engine(replace(LINK, storage_bandwidth=bandwidth))
    prompts = Prompts()
    a = prompts.tokens(300)
    send(engine, "a1", a, OUT)
    for i in range(8):
        send(engine, f"f{i}", prompts.tokens(300), OUT)
    a2 = send(engine, "a2", a, OUT)
    assert a2.storage_cached_tokens == 299
    return engine, a2


@pytest.mark.parametrize(("run", "read_tokens"), [(apc_run, 288), (radix_run, 299)])
def test_storage_bytes_are_tokens_times_bytes_per_token_and_a_slower_drive_delays_longer(
    run, read_tokens
):
    """apc's step waits for the read (the stall); radix's request waits for it before admission
    (its prefetch follows the read's clock), so no step stalls. Either way only the read got
    slower: the request's wait grew by exactly the read's growth."""
    ttft, stall, read_s = [], [], []
    for bandwidth in (1e5, 5e4):
        engine, a2 = run(bandwidth)
        fig = engine.executor.host_link.storage.figures()
        stats = engine.loop.scheduler.cache.storage_stats()
        assert fig.read_bytes == read_tokens * BYTES_PER_TOKEN
        assert fig.write_bytes == stats.stored * BYTES_PER_TOKEN
        assert fig.read_s == pytest.approx(fig.read_bytes / bandwidth)
        assert (fig.read_stall_s > 0) == (run is apc_run)
        ttft.append(a2.first_token_s - a2.arrival_s)
        stall.append(fig.read_stall_s)
        read_s.append(fig.read_s)
    assert ttft[1] > ttft[0]
    grew = stall[1] - stall[0] if run is apc_run else read_s[1] - read_s[0]
    assert ttft[1] - ttft[0] == pytest.approx(grew)


@pytest.mark.parametrize("run", [apc_run, radix_run])
def test_without_a_storage_bandwidth_the_bytes_are_counted_and_no_time_is_priced(run):
    engine, _ = run(None)
    fig = engine.executor.host_link.storage.figures()
    assert fig.read_bytes > 0 and fig.write_bytes > 0
    assert (fig.read_s, fig.write_s, fig.read_stall_s, fig.max_write_backlog_s) == (0, 0, 0, 0)
