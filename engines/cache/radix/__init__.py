"""SGLang 0.5.23 RadixAttention prefix cache (`UnifiedRadixCache`).

`build_radix(config)` builds a `RadixCache` (page size = `config.block_size`, capacity =
`config.kv_capacity_tokens`, the disabled mode when `prefix_caching` is false). Any scheduler design
(engines/sched/) drives it. `DESIGN`, its registration, is added to the cache registry in
engines/cache/__init__.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engines.cache.design import CacheDesign, FigureStyle
from engines.cache.radix.cache import RadixCache
from engines.cache.radix.hicache import TieredRadixCache
from engines.cache.radix.hicache_storage import StorageRadixCache
from engines.cache.radix.key import RadixKey
from engines.cache.radix.tree import UnifiedRadixTree

if TYPE_CHECKING:  # engines.config derives its design lists from the registry that imports this
    from engines.config import EngineConfig

__all__ = [
    "DESIGN",
    "RadixCache",
    "RadixKey",
    "StorageRadixCache",
    "TieredRadixCache",
    "UnifiedRadixTree",
    "build_radix",
]


def build_radix(config: EngineConfig) -> RadixCache:
    """A RadixCache for an `engines.config.EngineConfig`; with a host tier, the same cache with
    SGLang's HiCache host pool behind it, and with a storage tier its storage backend too."""
    common: dict[str, Any] = dict(
        page_size=config.block_size,
        capacity_tokens=(config.num_blocks - 1) * config.block_size,
        enabled=config.prefix_caching,
        eviction_policy=config.eviction_policy,
        max_num_reqs=config.max_num_seqs + 1,
    )
    if config.host_tier.enabled and config.storage_tier.enabled:
        return StorageRadixCache(tier=config.host_tier, storage=config.storage_tier, **common)
    if config.host_tier.enabled:
        return TieredRadixCache(tier=config.host_tier, **common)
    return RadixCache(**common)


DESIGN = CacheDesign(
    name="radix",
    build=build_radix,
    upstream_scheduler="sglang",
    knobs=("eviction_policy",),
    block_size=1,
    unit="page",
    label="SGLang RadixAttention",
    tier_knobs=("write_policy", "load_back_threshold"),  # its unit is a page
    tier_label="HiCache",  # SGLang's hierarchical cache
    storage_tier=True,  # HiCache's storage backend (docs/tiers.md §10.2)
    storage_knobs=(
        "prefetch_policy",
        "prefetch_threshold",
        "prefetch_timeout_base",
        "prefetch_timeout_per_ki_token",
    ),
    style=FigureStyle(
        colour="#ff7f0e",
        off_colour="#ffbb78",
        variant_colours={"lpm": "#2ca02c", "p16": "#d62728", "dfs-weight": "#9467bd"},
    ),
)
