"""Scheduler designs: `vllm` (vLLM 0.33 Scheduler) and `sglang` (SGLang 0.5.23 Scheduler).

The contract is `base.Scheduler`; each design drives any cache through the cache protocols
(engines/cache/protocol.py). `SCHEDULERS` maps a design name to its factory
`(cache, EngineConfig) -> Scheduler`; every design is registered below, in this one place.
"""

from __future__ import annotations

from engines.cache.protocol import AnyPrefixCache
from engines.config import EngineConfig
from engines.sched.base import SCHEDULERS
from engines.sched.policies import POLICIES
from engines.sched.sglang import SglangScheduler
from engines.sched.vllm import VllmScheduler
from engines.vllm_profile import FREE_ORDERS, STATS_TIMINGS

__all__ = ["POLICIES", "SglangScheduler", "VllmScheduler", "build_sglang", "build_vllm"]


def build_vllm(cache: AnyPrefixCache, config: EngineConfig) -> VllmScheduler:
    """vLLM's scheduler; None knobs follow the free-order profile (vLLM version behaviours,
    v024: both true). `free_order` is a knob of the hash cache; under any other cache validation
    keeps it at its default, v024, the 0.33 scheduler's profile."""
    profile = FREE_ORDERS.get(config.free_order)
    reserve = (
        profile.reserve_full_prompt
        if config.reserve_full_prompt is None
        else config.reserve_full_prompt
    )
    async_sched = (
        profile.async_scheduling if config.async_scheduling is None else config.async_scheduling
    )
    return VllmScheduler(
        cache,
        policy=config.policy,
        reserve_full_prompt=reserve,
        async_scheduling=async_sched,
        stats_at_lookup=STATS_TIMINGS.get(config.stats_timing),
        lpm_fallback_queue_len=config.lpm_fallback_queue_len,
    )


def build_sglang(cache: AnyPrefixCache, config: EngineConfig) -> SglangScheduler:
    """SGLang's scheduler with the config's prefill budget, policy knobs and event loop."""
    return SglangScheduler(
        cache,
        config.policy,
        max_prefill_tokens=config.max_prefill_tokens,
        clip_max_new_tokens=config.clip_max_new_tokens,
        schedule_conservativeness=config.schedule_conservativeness,
        lpm_fallback_queue_len=config.lpm_fallback_queue_len,
        in_batch_check_threshold=config.in_batch_check_threshold,
        in_batch_deprioritize_threshold=config.in_batch_deprioritize_threshold,
        waiting_prefix_refresh=config.waiting_prefix_refresh,
        overlap=config.overlap,
    )


# registry: every scheduler design
SCHEDULERS.add("vllm", build_vllm)
SCHEDULERS.add("sglang", build_sglang)
