"""Prefix caches behind one protocol, and the registry of cache designs.

The protocols are in `protocol.py`, the records they pass in `records.py`, a design's registration
record in `design.py`. A design is a package here (engines/cache/<name>/) exporting its
`CacheDesign` as `DESIGN`; `DESIGNS` registers every one below, in this one place, and is the only
list of designs: config validation, the report, the claims and the figures derive theirs from it.
`engines.sched.base.build_scheduler` pairs a cache with a scheduler design.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engines.cache import apc, radix
from engines.cache.design import CacheDesign
from engines.cache.protocol import AnyPrefixCache
from engines.registry import Registry

if TYPE_CHECKING:  # engines.config imports this registry for its validation
    from engines.config import EngineConfig

__all__ = ["DEFAULT_DESIGN", "DESIGNS", "build_cache", "designs", "designs_with"]

# registry: every cache design (listed by name, sorted, wherever designs are listed)
DESIGNS: Registry[CacheDesign] = Registry("cache")
for _design in (apc.DESIGN, radix.DESIGN):
    DESIGNS.add(_design.name, _design)
DEFAULT_DESIGN = apc.DESIGN.name  # `engine.cache` when a config names none


def designs() -> list[CacheDesign]:
    """Every registered design's registration, sorted by name."""
    return [DESIGNS.get(name) for name in DESIGNS.names()]


def designs_with(capability: type) -> list[str]:
    """The names of the designs whose cache has `capability` (engines/cache/protocol.py), sorted."""
    return [d.name for d in designs() if d.offers(capability)]


def build_cache(config: EngineConfig) -> AnyPrefixCache:
    """A new cache of the design `config.cache`."""
    return DESIGNS.get(config.cache).build(config)
