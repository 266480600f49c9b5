"""`apc`: vLLM V1 hash-based Automatic Prefix Caching, faithful to docs/apc.md.

hashing (chained block hashes) -> block (blocks, free queue) -> block_pool (map, eviction) ->
manager (tables, lookup, allocate_slots) -> cache (PrefixCache protocol) + admission (scheduler).
Importing this package registers the `apc` factory in `engines.cache.CACHES`.
"""

from __future__ import annotations

from engines.cache.apc.admission import WAITING_ORDERS, ApcAdmission
from engines.cache.apc.block_pool import FREE_ORDERS, BlockPool
from engines.cache.apc.cache import ApcCache
from engines.cache.apc.hashing import HASH_ALGOS, register_hash_fn
from engines.cache.apc.manager import KVCacheManager, PrefixCacheStats
from engines.cache.base import CACHES
from engines.config import EngineConfig

__all__ = [
    "ApcAdmission",
    "ApcCache",
    "BlockPool",
    "FREE_ORDERS",
    "HASH_ALGOS",
    "KVCacheManager",
    "PrefixCacheStats",
    "WAITING_ORDERS",
    "build_apc",
    "register_hash_fn",
]


@CACHES.register("apc")
def build_apc(config: EngineConfig) -> tuple[ApcCache, ApcAdmission]:
    """ApcCache + ApcAdmission from an EngineConfig; None options follow free_order (§0)."""
    profile = FREE_ORDERS.get(config.free_order)
    WAITING_ORDERS.get(config.policy)  # fail on unknown policies before building anything
    reserve = (
        profile.reserve_full_prompt
        if config.reserve_full_prompt is None
        else config.reserve_full_prompt
    )
    async_sched = (
        profile.async_scheduling if config.async_scheduling is None else config.async_scheduling
    )
    cache = ApcCache(
        config.num_blocks,
        config.block_size,
        enabled=config.prefix_caching,
        hash_algo=config.hash_algo,
        free_order=config.free_order,
        none_hash_seed=config.none_hash_seed,
        stats_timing=config.stats_timing,
        verify_tokens_on_hit=config.verify_tokens_on_hit,
        debug=config.debug_checks,
    )
    admission = ApcAdmission(
        cache,
        policy=config.policy,
        reserve_full_prompt=reserve,
        async_scheduling=async_sched,
        lpm_fallback_queue_len=config.lpm_fallback_queue_len,
    )
    return cache, admission
