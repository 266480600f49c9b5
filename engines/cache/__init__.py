"""Prefix caches: `apc` (vLLM V1 hash APC) and `radix` (SGLang RadixCache), behind one protocol.

The protocols are in `protocol.py`, the records they pass in `records.py`. `CACHES` maps a design
name to its factory `(EngineConfig) -> PrefixCache`; every design is registered below, in this one
place. `engines.sched.base.build_scheduler` pairs a cache with a scheduler design.
"""

from __future__ import annotations

from collections.abc import Callable

from engines.cache.apc import build_apc
from engines.cache.protocol import PrefixCache
from engines.cache.radix import build_radix
from engines.config import EngineConfig
from engines.registry import Registry

__all__ = ["CACHES", "build_cache"]

# registry: every cache design
CACHES: Registry[Callable[[EngineConfig], PrefixCache]] = Registry("cache")
CACHES.add("apc", build_apc)
CACHES.add("radix", build_radix)


def build_cache(config: EngineConfig) -> PrefixCache:
    """A new cache of the design `config.cache`."""
    return CACHES.get(config.cache)(config)
