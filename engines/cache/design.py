"""`CacheDesign`: one registration of a cache design, everything the tree needs to know about it.

A design is a package under engines/cache (its data structure and its `PrefixCache`) plus one
`CacheDesign` that package exports as `DESIGN`; engines/cache/__init__.py registers each in
`DESIGNS`. Config validation, the report, the claims, the figures and the docs derive every list
of designs from that registry, never from a hard-coded name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engines.cache.protocol import PrefixCache
    from engines.cache.tiers import HostTierConfig
    from engines.config import EngineConfig


@dataclass(frozen=True)
class FigureStyle:
    """How figures draw a design's arms: the shipped arm, caching off, and its named variants
    (an arm `<design>-<variant>` or `<design> <variant>`, e.g. a policy or a page size)."""

    colour: str
    off_colour: str
    variant_colours: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CacheDesign:
    """A cache design's registration.

    name: the `engine.cache` value, the arm label of its shipped pairing and its conf/engine
      preset stem. build: a new cache for an `EngineConfig` (its protocol implementation).
    upstream_scheduler: the scheduler design its upstream ships it with (`engine.scheduler`
      None means this one; the cross preset is `<name>_<other scheduler>`).
    knobs: the `EngineConfig` fields only this design reads (validation refuses them set away
      from their defaults under another design; `design_knobs()` reports them).
    block_size: the preset's KV granularity (its upstream default; the report names arms run at
      another size). unit: what one KV granule is called in labels (`block`, `page`).
    label: its name in prose and figure titles. style: its figure colours.
    source: the package whose wall time the overhead profile attributes to this design (the
      simulator prices every design's steps from the protocol alone: `block_size`, decode runs).
    tier_knobs: the `engine.host_tier` fields only this design's host tier reads
      (engines/cache/tiers.py). tier_unit: the tokens in one unit of its tier (its hit granularity)
      for a tier config and a block size. tier_label: its host tier's name in prose and tables
      (what its upstream calls it). storage_knobs: the `engine.storage_tier` fields only this
      design's storage tier reads (engines/cache/storage_tier.py). storage_tier: whether its
      build gives a storage tier (its cache then offers `StorageTier`); a run asking another
      design for one is refused. storage_refuses: why a host tier config cannot take its
      storage tier (what its upstream refuses), or None.
    """

    name: str
    build: Callable[[EngineConfig], PrefixCache[Any, Any]]
    upstream_scheduler: str
    knobs: tuple[str, ...]
    block_size: int
    unit: str
    label: str
    style: FigureStyle
    tier_knobs: tuple[str, ...] = ()
    tier_unit: Callable[[HostTierConfig, int], int] = lambda tier, block_size: block_size
    tier_label: str = "host tier"
    storage_knobs: tuple[str, ...] = ()
    storage_tier: bool = False
    storage_refuses: Callable[[HostTierConfig], str | None] = lambda tier: None

    def offers(self, capability: type) -> bool:
        """Whether this design's cache has `capability` (a runtime-checkable protocol of
        engines/cache/protocol.py), asked before any cache is built (a small sample answers)."""
        return _offers(self.name, self.build, self.block_size, capability)

    @property
    def source(self) -> str:
        return f"engines/cache/{self.name}/"


@cache
def _offers(
    name: str, build: Callable[[EngineConfig], PrefixCache[Any, Any]], size: int, capability: type
) -> bool:
    from engines.config import EngineConfig  # it validates against the registry that imports us

    sample = build(EngineConfig(cache=name, block_size=size, kv_capacity_tokens=4 * size))
    return isinstance(sample, capability)
