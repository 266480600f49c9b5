"""SGLang 0.5.23 RadixAttention prefix cache (`UnifiedRadixCache`) and its scheduler (docs/radix.md).

`CACHES["radix"](config)` builds a `RadixCache` (page size = `config.block_size`, capacity =
`config.kv_capacity_tokens`, the disabled mode when `prefix_caching` is false) and its
`RadixAdmission` (policy, budgets and thresholds from the same config).
"""

from __future__ import annotations

from typing import Any

from engines.cache.base import CACHES
from engines.cache.radix.admission import RadixAdmission
from engines.cache.radix.cache import RadixCache
from engines.cache.radix.key import RadixKey
from engines.cache.radix.tree import UnifiedRadixTree

__all__ = ["RadixAdmission", "RadixCache", "RadixKey", "UnifiedRadixTree", "build_radix"]


@CACHES.register("radix")
def build_radix(config: Any) -> tuple[RadixCache, RadixAdmission]:
    """(PrefixCache, Admission) for an `engines.config.EngineConfig`."""
    cache = RadixCache(
        page_size=config.block_size,
        capacity_tokens=(config.num_blocks - 1) * config.block_size,
        enabled=config.prefix_caching,
        eviction_policy=config.eviction_policy,
        max_num_reqs=config.max_num_seqs + 1,
    )
    admission = RadixAdmission(
        cache,
        config.policy,
        max_prefill_tokens=config.max_prefill_tokens,
        clip_max_new_tokens=config.clip_max_new_tokens,
        schedule_conservativeness=config.schedule_conservativeness,
        lpm_fallback_queue_len=config.lpm_fallback_queue_len,
        in_batch_check_threshold=config.in_batch_check_threshold,
        in_batch_deprioritize_threshold=config.in_batch_deprioritize_threshold,
        waiting_prefix_refresh=config.waiting_prefix_refresh,
    )
    return cache, admission
