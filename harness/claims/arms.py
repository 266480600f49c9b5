"""Arms and deployment presets the claims share, as Hydra overrides.

The simulated presets give the engine the budgets of a GPU deployment (KV tokens that fit the
preset's memory after weights, vLLM-like batch limits); hit rates do not depend on the executor,
so claims about reuse run there too, where a run takes a second.
"""

from __future__ import annotations

from harness.claims.experiment import has_option, has_preset

ARMS: dict[str, tuple[str, ...]] = {
    "apc": ("engine=apc",),
    "apc-off": ("engine=apc", "engine.prefix_caching=false"),
    "radix": ("engine=radix",),
    "radix-off": ("engine=radix", "engine.prefix_caching=false"),
    "radix-p16": ("engine=radix", "engine.block_size=16"),
    "radix-lpm": ("engine=radix", "engine.policy=lpm"),  # SGLang's default schedule in 2024
    "radix-lpm-off": ("engine=radix", "engine.policy=lpm", "engine.prefix_caching=false"),
}
# [2/6]'s cross arms: the other design's scheduler driving each cache.
CROSS_ARMS: dict[str, tuple[str, ...]] = {
    "radix+vllm": ("engine=radix_vllm",),
    "apc+sglang": ("engine=apc_sglang",),
    # APC under SGLang's cache-aware schedule: what the schedule gives a hash cache (claim 16)
    "apc+sglang-lpm": ("engine=apc_sglang", "engine.policy=lpm"),
}
GPU_BUDGETS = ("engine.max_num_batched_tokens=8192", "engine.max_num_seqs=256")
# KV capacity: the preset file's "tokens fit in memory" comment, rounded down to a block of 16.
H100_8B = (
    "executor=simulated",
    "hardware=h100_llama3_8b_bf16",
    "engine.kv_capacity_tokens=426784",
    *GPU_BUDGETS,
)
H100_70B_FP8 = (
    "executor=simulated",
    "hardware=h100_llama3_70b_fp8",
    "engine.kv_capacity_tokens=447984",
    *GPU_BUDGETS,
)
GPU_PRESETS = (
    "h100_llama3_8b_bf16",
    "h100_llama3_70b_bf16",
    "h100_llama3_70b_fp8",
    "h200_llama3_8b_bf16",
    "h200_llama3_70b_bf16",
    "h200_llama3_70b_fp8",
)


def cross_arms_missing() -> str | None:
    """Why the scheduler x cache arms cannot run here, or None when they can."""
    if not has_option("engine", "scheduler"):
        return "needs engine.scheduler (the scheduler x cache split of issue [2/6])"
    absent = [a for a in ("radix_vllm", "apc_sglang") if not has_preset("engine", a)]
    if absent:
        return f"needs the engine presets {', '.join(absent)} (issue [2/6])"
    return None


def arm(name: str) -> tuple[str, ...]:
    return {**ARMS, **CROSS_ARMS}[name]
