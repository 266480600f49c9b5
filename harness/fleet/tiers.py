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
from typing import Any, TypeVar

from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import HostTier, TierStats
from engines.engine import Engine
from engines.host_link import CarriesHostLink, LinkFigures
from engines.storage_link import StorageLinkFigures

F = TypeVar("F", LinkFigures, StorageLinkFigures)


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
    return _combined(
        [
            e.executor.host_link.figures()
            for e in replicas
            if isinstance(e.executor, CarriesHostLink) and e.executor.host_link is not None
        ]
    )


def fleet_storage_link_figures(replicas: Sequence[Engine]) -> StorageLinkFigures | None:
    """The replicas' storage links (each node its own): bytes and busy seconds summed, the read
    stall in replica-seconds, the worst write backlog; None when no replica prices one."""
    return _combined(
        [
            e.executor.host_link.storage.figures()
            for e in replicas
            if isinstance(e.executor, CarriesHostLink)
            and e.executor.host_link is not None
            and e.executor.host_link.storage is not None
        ]
    )


# A link's figures that describe the link, not its traffic: alike on every replica
_PER_LINK = ("bandwidth_bytes_per_s", "kv_bytes_per_token")


def _combined(links: list[F]) -> F | None:
    """One link's figures for the fleet: bytes and seconds summed, a `max_` backlog the worst
    replica's, the link's own constants the first's (replicas are alike)."""
    if not links:
        return None

    def combine(name: str) -> Any:  # the field's own type: int, float or None
        values = [getattr(f, name) for f in links]
        if name in _PER_LINK:
            return values[0]
        return max(values) if name.startswith("max_") else sum(values)

    return type(links[0])(**{f.name: combine(f.name) for f in fields(links[0])})
