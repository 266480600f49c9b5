"""Arms and deployment presets the claims share, as Hydra overrides.

The simulated presets give the engine the budgets of a GPU deployment (KV tokens that fit the
preset's memory after weights, vLLM-like batch limits); hit rates do not depend on the executor,
so claims about reuse run there too, where a run takes a second.

The claims re-measure published statements about two designs, so they name those two: through
their packages' registrations (`APC`, `RADIX`), never as literals (tests/unit/test_design_registry.py).
"""

from __future__ import annotations

from engines.cache import DESIGNS, apc, radix
from engines.config import UPSTREAM_SCHEDULER
from harness.claims.experiment import has_option, has_preset

APC, RADIX = apc.DESIGN.name, radix.DESIGN.name  # the designs the claims are about
OFF = "engine.prefix_caching=false"


def preset(design: str, scheduler: str | None = None) -> str:
    """A design's engine preset (conf/engine): its upstream pairing, or `<design>_<scheduler>`."""
    return design if scheduler in (None, UPSTREAM_SCHEDULER[design]) else f"{design}_{scheduler}"


def engine(design: str, scheduler: str | None = None) -> str:
    """The override that selects a design's preset."""
    return f"engine={preset(design, scheduler)}"


def cross(design: str) -> str:
    """The scheduler a design's upstream does not ship with it (its cross arm's)."""
    return next(
        s for s in sorted(set(UPSTREAM_SCHEDULER.values())) if s != UPSTREAM_SCHEDULER[design]
    )


# every design's shipped arm and its caching-off arm, then the tree's variants
ARMS: dict[str, tuple[str, ...]] = {
    **{
        a: o
        for d in DESIGNS.names()
        for a, o in ((d, (engine(d),)), (f"{d}-off", (engine(d), OFF)))
    },
    f"{RADIX}-p16": (engine(RADIX), "engine.block_size=16"),
    f"{RADIX}-lpm": (engine(RADIX), "engine.policy=lpm"),  # SGLang's default schedule in 2024
    f"{RADIX}-lpm-off": (engine(RADIX), "engine.policy=lpm", OFF),
}
# [2/6]'s cross arms: the other design's scheduler driving each cache.
CROSS_ARMS: dict[str, tuple[str, ...]] = {
    f"{RADIX}+{cross(RADIX)}": (engine(RADIX, cross(RADIX)),),
    f"{APC}+{cross(APC)}": (engine(APC, cross(APC)),),
    # APC under SGLang's cache-aware schedule: what the schedule gives a hash cache (claim 16)
    f"{APC}+{cross(APC)}-lpm": (engine(APC, cross(APC)), "engine.policy=lpm"),
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
    presets = [preset(d, cross(d)) for d in (RADIX, APC)]
    absent = [a for a in presets if not has_preset("engine", a)]
    if absent:
        return f"needs the engine presets {', '.join(absent)} (issue [2/6])"
    return None


def arm(name: str) -> tuple[str, ...]:
    return {**ARMS, **CROSS_ARMS}[name]
