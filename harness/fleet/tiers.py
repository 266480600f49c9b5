"""A fleet's tiers as one: each replica's tier counters and link figures summed into the fleet
summary's `host_tier` and `host_link` (and, with a storage tier, `storage_tier` and
`storage_link`), the shapes a one-engine run writes (docs/tiers.md §9).

Each replica owns its tiers and its links (one GPU's PCIe link to its own host memory, one node's
own storage: both upstreams' file backends are a folder per server), so bytes, tokens and seconds
of link time add up; the largest backlog is the worst replica's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import HostTier, TierStats
from engines.engine import Engine
from engines.host_link import CarriesHostLink, LinkFigures
from engines.storage_link import StorageLinkFigures


def fleet_tier_stats(replicas: Sequence[Engine]) -> TierStats | None:
    """The replicas' tier counters summed (None: the replicas have no host tier)."""
    return _summed([e.cache.host_stats() for e in replicas if isinstance(e.cache, HostTier)])


def fleet_storage_stats(replicas: Sequence[Engine]) -> TierStats | None:
    """The replicas' storage-tier counters summed (None: the replicas have no storage tier)."""
    return _summed([e.cache.storage_stats() for e in replicas if isinstance(e.cache, StorageTier)])


def _summed(stats: list[TierStats]) -> TierStats | None:
    if not stats:
        return None
    return TierStats(**{f.name: sum(getattr(s, f.name) for s in stats) for f in fields(TierStats)})


def fleet_link_figures(replicas: Sequence[Engine]) -> LinkFigures | None:
    """The replicas' host links: bytes and link seconds summed (`load_stall_s` is then replica-
    seconds of step time the loads added, over the fleet), the worst store backlog; None when no
    replica prices or counts a link."""
    links = [
        e.executor.host_link.figures()
        for e in replicas
        if isinstance(e.executor, CarriesHostLink) and e.executor.host_link is not None
    ]
    if not links:
        return None
    return LinkFigures(
        bandwidth_bytes_per_s=links[0].bandwidth_bytes_per_s,  # replicas are alike
        kv_bytes_per_token=links[0].kv_bytes_per_token,
        load_bytes=sum(f.load_bytes for f in links),
        store_bytes=sum(f.store_bytes for f in links),
        load_s=sum(f.load_s for f in links),
        load_stall_s=sum(f.load_stall_s for f in links),
        max_store_backlog_s=max(f.max_store_backlog_s for f in links),
    )


def fleet_storage_link_figures(replicas: Sequence[Engine]) -> StorageLinkFigures | None:
    """The replicas' storage links (each node its own): bytes and busy seconds summed, the read
    stall in replica-seconds, the worst write backlog; None when no replica prices one."""
    links = [
        e.executor.host_link.storage.figures()
        for e in replicas
        if isinstance(e.executor, CarriesHostLink)
        and e.executor.host_link is not None
        and e.executor.host_link.storage is not None
    ]
    if not links:
        return None
    return StorageLinkFigures(
        bandwidth_bytes_per_s=links[0].bandwidth_bytes_per_s,  # replicas are alike
        kv_bytes_per_token=links[0].kv_bytes_per_token,
        read_bytes=sum(f.read_bytes for f in links),
        write_bytes=sum(f.write_bytes for f in links),
        read_s=sum(f.read_s for f in links),
        write_s=sum(f.write_s for f in links),
        read_stall_s=sum(f.read_stall_s for f in links),
        max_write_backlog_s=max(f.max_write_backlog_s for f in links),
    )
