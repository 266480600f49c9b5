"""A fleet's host tiers as one: each replica's tier counters and host-link figures summed into the
fleet summary's `host_tier` and `host_link`, the shapes a one-engine run writes (docs/tiers.md §9).

Each replica owns its tier and its link (one GPU's PCIe link to its own host memory), so bytes,
tokens and seconds of link time add up; the largest store backlog is the worst replica's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from engines.cache.tiers import HostTier, TierStats
from engines.engine import Engine
from engines.host_link import CarriesHostLink, LinkFigures


def fleet_tier_stats(replicas: Sequence[Engine]) -> TierStats | None:
    """The replicas' tier counters summed (None: the replicas have no host tier)."""
    stats = [e.cache.host_stats() for e in replicas if isinstance(e.cache, HostTier)]
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
