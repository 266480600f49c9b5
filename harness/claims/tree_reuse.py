"""Claim 6: tree-shaped reuse (multi-turn, parallel sampling) is where the tree pays off.

The main setting is Poisson arrivals (a rate sweep in the full run), not one burst: in a burst
vLLM's scheduler shares blocks hashed in the same step, which neither the tree nor SGLang's
scheduler can, and that mechanism is its own finding (claim 10, harness/claims/burst.py). The
tree's effect is taken at equal granularity (radix at page 16 against apc's block 16, the cache
swapped under each scheduler), so page 1 vs 16 is reported as granularity, not as the tree; a
KV-pressure arm makes leaf-LRU against block-LRU eviction matter. Effects follow
harness/claims/effects.py (interaction = half the difference of differences).
"""

from __future__ import annotations

import json

import pandas as pd

from harness.claims import keys
from harness.claims.arms import APC, H100_8B, RADIX, cross_arms_missing, engine, preset
from harness.claims.effects import CONVENTION, Effects, effects
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, not_measurable

FOLDER = "6-decomposition"
POINTS = 0.02  # a tree effect of 2 hit-rate points or more is "pays off"
TREE_SHAPED = ("multiturn", "parallel", "agent")
PLAIN = ("system_prompt", "fewshot")
RATE_FRACTIONS_FULL = (0.25, 0.5, 0.9)  # of the burst's request throughput (apc + vLLM)
MAIN_FRACTION = 0.5
# KV pressure: a quarter of the workload's distinct prompt content, but at least twice the
# largest request (so every request still fits), in whole pages of 16.
PRESSURE_SHARE = 0.25
RADIX16 = f"{RADIX}16"  # the tree at the hash cache's granularity
CACHES = {  # cache level -> overrides on top of the scheduler's engine preset
    APC: (),
    RADIX16: ("engine.block_size=16",),
    RADIX: (),
}
SCHEDULERS = ("vllm", "sglang")
# (cache kind, scheduler) -> engine preset
PRESETS = {(kind, sched): preset(kind, sched) for kind in (APC, RADIX) for sched in SCHEDULERS}


def arm_overrides(cache: str, scheduler: str) -> tuple[str, ...]:
    """A cell of the grid: the cache level (apc | radix16 | radix) under a scheduler."""
    kind = APC if cache == APC else RADIX
    return (f"engine={PRESETS[kind, scheduler]}", *CACHES[cache])


def measure(ctx: Context) -> Finding:
    names = ctx.size(("system_prompt", "multiturn"), (*PLAIN, *TREE_SHAPED))
    fractions = ctx.size((MAIN_FRACTION,), RATE_FRACTIONS_FULL)
    setup = (
        f"simulated H100 Llama-3.1-8B; Poisson arrivals at {', '.join(map(str, fractions))} x the "
        "burst's request throughput (apc+vLLM); KV 426,784 tokens and a pressure arm (a quarter of the distinct prompt tokens); SGLang's "
        f"front stage on; workloads {', '.join(names)}"
    )
    measured = (
        "token hit rate of apc, radix page 16 and radix page 1 under each scheduler; tree effect "
        f"(apc -> radix p16) and granularity (p16 -> p1) per scheduler; {CONVENTION}"
    )
    missing = cross_arms_missing()
    if missing:
        return Finding(setup, measured, "not run", not_measurable(missing))
    rows = [
        _row(ctx, w, f, kv)
        for w in names
        for f in fractions
        for kv in (None, pressure_capacity(ctx, w))
    ]
    verdict = _verdict(rows)
    main = [r for r in rows if r["rate_fraction"] == MAIN_FRACTION]
    result = "; ".join(_describe(r) for r in main)
    return Finding(
        setup=setup,
        measured=measured,
        result=result,
        verdict=verdict,
        figure=Figure(
            "Tree effect at equal page size (Poisson, half load)",
            "hit-rate points",
            {
                f"{r['workload']} {r['capacity']}": {
                    "tree (apc -> radix p16)": 100 * r["tree_main"],
                    "granularity (p16 -> p1)": 100 * r["granularity_main"],
                }
                for r in main
            },
            reference=100 * POINTS,
            reference_label="2 points",
        ),
        details=rows,
    )


CLAIM = Claim(
    6,
    "decomposition",
    "Tree-shaped reuse (multi-turn, parallel sampling) is where the tree pays off; a plain shared prefix does "
    "not need it.",
    "SGLang RadixAttention (LMSYS blog, January 2024; NeurIPS 2024 paper)",
    "Under Poisson arrivals at half the burst's request throughput (full run: also 1/4 and 9/10 of it), the "
    "tree's effect is the hit-rate change from apc to radix at page 16 (equal granularity), the cache swapped "
    "under each scheduler: the main effect (mean of the two simple effects) when the interaction (half their "
    "difference) is smaller than it, otherwise each simple effect. Holds when that effect is >= 2 points on "
    "every tree-shaped workload, with ample KV (426,784 tokens) and under KV pressure (a quarter of the workload's distinct prompt tokens, at least twice its largest request), and < 2 "
    "points on every plain shared-prefix one; does not hold when it is < 2 points on every tree-shaped "
    "workload in both capacities; depends on the workload otherwise. Page 1 vs 16 is reported as "
    "granularity, never counted as the tree's.",
    measure,
)


def _verdict(rows: list[dict]) -> str:
    tree = [r for r in rows if r["workload"] in TREE_SHAPED]
    plain = [r for r in rows if r["workload"] in PLAIN]
    if all(r["tree_pays"] for r in tree) and all(
        not r["tree_pays"] and abs(r["tree_main"]) < POINTS for r in plain
    ):
        return HOLDS
    if not any(r["tree_pays"] for r in tree):
        return FAILS
    return depends("the workload and capacity (see the per-workload effects)")


def _describe(r: dict) -> str:
    return (
        f"{r['workload']} ({r['capacity']}, {r['rate_rps']:.1f} req/s): tree {r['tree_text']}; "
        f"granularity {r['granularity_text']} (hit rates "
        + ", ".join(f"{k} {v:.1%}" for k, v in r["hits"].items())
        + f"; evictions {r['evictions']})"
    )


def burst_rate(ctx: Context, workload: str) -> float:
    """apc + vLLM's request throughput in one burst: the rate the Poisson sweep is scaled by."""
    name = f"{workload}-burst-rate"
    done = ctx.out_dir / "runs" / FOLDER / name / "summary.json"
    if done.is_file():  # measured for an earlier row of this invocation
        summary = json.loads(done.read_text())
    else:
        summary = ctx.run(FOLDER, name, (*H100_8B, f"workload={workload}", engine(APC))).summary
    return keys.value(summary, "request_throughput")


def pressure_capacity(ctx: Context, workload: str) -> int:
    """KV tokens for the pressure arm, from the burst run's request table."""
    burst_rate(ctx, workload)
    df = pd.read_parquet(
        ctx.out_dir / "runs" / FOLDER / f"{workload}-burst-rate" / "requests.parquet"
    )
    need = int((df["prompt_tokens"] + df["output_tokens"]).max())
    distinct = int((df["prompt_tokens"] - df["shared_prefix_len"].clip(lower=0)).sum())
    tokens = max(2 * need, int(PRESSURE_SHARE * distinct))
    return -(-tokens // 16) * 16


def _row(ctx: Context, workload: str, fraction: float, kv: int | None) -> dict:
    rate = fraction * burst_rate(ctx, workload)
    load = ("load.mode=poisson", f"load.rate={rate:.6g}")
    capacity = () if kv is None else (f"engine.kv_capacity_tokens={kv}",)
    tag = f"{workload}-r{fraction}-{'kv' + str(kv) if kv else 'ample'}"
    cells, evictions = {}, {}
    for cache in CACHES:
        for sched in SCHEDULERS:
            over = (
                *H100_8B,
                f"workload={workload}",
                *load,
                *capacity,
                *arm_overrides(cache, sched),
            )
            s = ctx.run(FOLDER, f"{tag}-{cache}-{sched}", over).summary
            cells[cache, sched] = keys.value(s, keys.HIT_RATE)
            evictions[f"{cache}+{sched}"] = int(keys.value(s, keys.EVICTIONS))
    tree: Effects = effects(cells, (APC, RADIX16), SCHEDULERS)
    gran: Effects = effects(cells, (RADIX16, RADIX), SCHEDULERS)
    return {
        "workload": workload,
        "rate_fraction": fraction,
        "rate_rps": rate,
        "capacity": "ample KV" if kv is None else f"{kv} KV tokens",
        "hits": {f"{c}+{s}": v for (c, s), v in cells.items()},
        "evictions": sum(evictions.values()),
        "tree_main": tree.main,
        "tree_interaction": tree.interaction,
        "tree_simple": tree.simple,
        "tree_pays": tree.judged(lambda v: v >= POINTS),
        "tree_text": tree.text(),
        "granularity_main": gran.main,
        "granularity_interaction": gran.interaction,
        "granularity_text": gran.text(),
    }
