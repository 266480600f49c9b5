"""`apc`: vLLM V1 hash-based Automatic Prefix Caching (vLLM 0.33 KVCacheManager and BlockPool).

hashing (chained block hashes) -> block (blocks, free queue) -> pool_loops (the pool's hot
loops, C where built) -> block_pool (map, eviction) -> manager (tables, lookup, allocate_slots) ->
cache (the PrefixCache protocol). Any scheduler design (engines/sched/) drives it; `DESIGN`, its
registration (name, factory `build_apc`, knobs, figure colours), is added to the cache registry in
engines/cache/__init__.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engines.cache.apc.block_pool import FREE_ORDERS, BlockPool
from engines.cache.apc.cache import ApcCache
from engines.cache.apc.hashing import HASH_ALGOS, extra_hash_fn
from engines.cache.apc.manager import KVCacheManager, PrefixCacheStats
from engines.cache.apc.tiered import StorageTieredApcCache, TieredApcCache
from engines.cache.design import CacheDesign, FigureStyle

if TYPE_CHECKING:  # engines.config derives its design lists from the registry that imports this
    from engines.cache.tiers import HostTierConfig
    from engines.config import EngineConfig

__all__ = [
    "DESIGN",
    "ApcCache",
    "BlockPool",
    "FREE_ORDERS",
    "HASH_ALGOS",
    "KVCacheManager",
    "PrefixCacheStats",
    "StorageTieredApcCache",
    "TieredApcCache",
    "build_apc",
    "extra_hash_fn",
]


def build_apc(config: EngineConfig) -> ApcCache:
    """An ApcCache from an EngineConfig (unknown free orders fail before anything is built);
    with a host tier, the same cache with vLLM's CPU offloading tier behind it, and with a storage
    tier, vLLM's file-system tier behind that."""
    FREE_ORDERS.get(config.free_order)
    kwargs = dict(
        enabled=config.prefix_caching,
        hash_algo=config.hash_algo,
        free_order=config.free_order,
        none_hash_seed=config.none_hash_seed,
        verify_tokens_on_hit=config.verify_tokens_on_hit,
        head_first=config.free_direction == "head_first",
        debug=config.debug_checks,
    )
    if config.host_tier.enabled and config.storage_tier.enabled:
        return StorageTieredApcCache(
            config.num_blocks, config.block_size, tier=config.host_tier, **kwargs
        )
    if config.host_tier.enabled:
        return TieredApcCache(config.num_blocks, config.block_size, tier=config.host_tier, **kwargs)  # type: ignore[arg-type]
    return ApcCache(config.num_blocks, config.block_size, **kwargs)  # type: ignore[arg-type]


def _tiering_refuses(tier: HostTierConfig) -> str | None:
    """vLLM 0.33's TieringOffloadingSpec.get_manager refuses a store threshold above 1."""
    if tier.store_threshold > 1:
        return (
            "needs engine.host_tier.store_threshold 1 (vLLM's tiering refuses a store "
            f"threshold), got {tier.store_threshold}"
        )
    return None


DESIGN = CacheDesign(
    name="apc",
    build=build_apc,
    upstream_scheduler="vllm",
    knobs=("hash_algo", "free_order", "none_hash_seed", "verify_tokens_on_hit", "free_direction"),
    block_size=16,
    unit="block",
    label="vLLM hash-based Automatic Prefix Caching",
    tier_knobs=("policy", "blocks_per_chunk", "store_threshold", "offload_prompt_only"),
    tier_unit=lambda tier, block_size: block_size * tier.blocks_per_chunk,  # a chunk
    tier_label="CPU tier",  # vLLM's CPU offloading connector
    storage_tier=True,  # vLLM's TieringOffloadingManager with its file-system tier
    storage_refuses=_tiering_refuses,
    style=FigureStyle(
        colour="#1f77b4",
        off_colour="#aec7e8",
        variant_colours={"v024": "#1f77b4", "classic": "#17becf"},
    ),
)
