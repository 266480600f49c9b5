"""SGLang 0.5.23 RadixAttention prefix cache (`UnifiedRadixCache`).

`build_radix(config)`, registered as `radix` in engines/cache/__init__.py, builds a `RadixCache`
(page size = `config.block_size`, capacity = `config.kv_capacity_tokens`, the disabled mode when
`prefix_caching` is false). Any scheduler design (engines/sched/) drives it.
"""

from __future__ import annotations

from engines.cache.radix.cache import RadixCache
from engines.cache.radix.key import RadixKey
from engines.cache.radix.tree import UnifiedRadixTree
from engines.config import EngineConfig

__all__ = ["RadixCache", "RadixKey", "UnifiedRadixTree", "build_radix"]


def build_radix(config: EngineConfig) -> RadixCache:
    """A RadixCache for an `engines.config.EngineConfig`."""
    return RadixCache(
        page_size=config.block_size,
        capacity_tokens=(config.num_blocks - 1) * config.block_size,
        enabled=config.prefix_caching,
        eviction_policy=config.eviction_policy,
        max_num_reqs=config.max_num_seqs + 1,
    )
