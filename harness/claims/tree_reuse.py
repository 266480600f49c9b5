"""Claim 6: tree-shaped reuse (multi-turn, parallel sampling) is where the tree pays off.

Per workload, the 2 x 2 arms of [2/6] (cache apc|radix x scheduler vllm|sglang): the data-structure
effect is the hit-rate change from swapping the cache under one scheduler, averaged over both
schedulers; the scheduler effect swaps the scheduler under one cache.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import H100_8B, arm, cross_arms_missing
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, not_measurable

FOLDER = "6-decomposition"
POINTS = 0.02  # a data-structure effect of 2 hit-rate points or more is "pays off"
TREE_SHAPED = ("multiturn", "parallel", "agent")
PLAIN = ("system_prompt", "fewshot")
# (cache, scheduler) -> arm name
GRID = {
    ("apc", "vllm"): "apc",
    ("radix", "vllm"): "radix+vllm",
    ("apc", "sglang"): "apc+sglang",
    ("radix", "sglang"): "radix",
}


def measure(ctx: Context) -> Finding:
    setup = "simulated H100 Llama-3.1-8B, burst; workloads " + ", ".join((*PLAIN, *TREE_SHAPED))
    measured = (
        "hit rate and TTFT p50 of the 2x2 arms; data-structure effect (cache swapped, mean over "
        "schedulers), scheduler effect (scheduler swapped, mean over caches) and their interaction"
    )
    missing = cross_arms_missing()
    if missing:
        return Finding(setup, measured, "not run", not_measurable(missing))
    names = ctx.size(("system_prompt", "multiturn", "parallel"), (*PLAIN, *TREE_SHAPED))
    rows = [_effects(ctx, w) for w in names]
    tree = [r["data_structure"] for r in rows if r["workload"] in TREE_SHAPED]
    plain = [r["data_structure"] for r in rows if r["workload"] in PLAIN]
    if all(t >= POINTS for t in tree) and all(abs(p) < POINTS for p in plain):
        verdict = HOLDS
    elif all(t < POINTS for t in tree):
        verdict = FAILS
    else:
        verdict = depends("the workload (see the per-workload effects)")
    result = "; ".join(
        f"{r['workload']}: data structure {100 * r['data_structure']:+.1f} pts, scheduler {100 * r['scheduler']:+.1f} pts, "
        f"interaction {100 * r['interaction']:+.1f} pts (hit rates apc+vllm {r['hit_apc+vllm']:.1%}, radix+vllm "
        f"{r['hit_radix+vllm']:.1%}, apc+sglang {r['hit_apc+sglang']:.1%}, radix+sglang {r['hit_radix+sglang']:.1%}; "
        f"TTFT p50 {r['ttft_data_structure']:+.0%} / {r['ttft_scheduler']:+.0%})"
        for r in rows
    )
    return Finding(
        setup=setup.replace(", ".join((*PLAIN, *TREE_SHAPED)), ", ".join(names)),
        measured=measured,
        result=result,
        verdict=verdict,
        figure=Figure(
            "Data-structure and scheduler effects on hit rate",
            "hit-rate points",
            {
                r["workload"]: {
                    "data structure": 100 * r["data_structure"],
                    "scheduler": 100 * r["scheduler"],
                }
                for r in rows
            },
            reference=100 * POINTS,
            reference_label="2 points",
        ),
        details=rows,
    )


def _effects(ctx: Context, workload: str) -> dict:
    summaries = {
        cell: ctx.run(
            FOLDER, f"{workload}-{name}", (*H100_8B, f"workload={workload}", *arm(name))
        ).summary
        for cell, name in GRID.items()
    }
    hit = {cell: keys.value(s, keys.HIT_RATE) for cell, s in summaries.items()}
    ttft = {cell: keys.value(s, keys.TTFT_P50) for cell, s in summaries.items()}
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    row = {"workload": workload, **{f"hit_{c}+{s}": v for (c, s), v in hit.items()}}
    row["data_structure"] = mean([hit["radix", s] - hit["apc", s] for s in ("vllm", "sglang")])
    row["scheduler"] = mean([hit[c, "sglang"] - hit[c, "vllm"] for c in ("apc", "radix")])
    # How much the cache swap's effect changes with the scheduler: an effect seen in one cell only.
    row["interaction"] = (hit["radix", "sglang"] - hit["apc", "sglang"]) - (
        hit["radix", "vllm"] - hit["apc", "vllm"]
    )
    row["ttft_data_structure"] = mean(
        [ttft["radix", s] / ttft["apc", s] - 1 for s in ("vllm", "sglang")]
    )
    row["ttft_scheduler"] = mean(
        [ttft[c, "sglang"] / ttft[c, "vllm"] - 1 for c in ("apc", "radix")]
    )
    return row


CLAIM = Claim(
    6,
    "decomposition",
    "Tree-shaped reuse (multi-turn, parallel sampling) is where the tree pays off; a plain shared prefix does "
    "not need it.",
    "SGLang RadixAttention (LMSYS blog, January 2024; NeurIPS 2024 paper)",
    "Holds when the data-structure effect (radix cache - apc cache, same scheduler, mean of both schedulers) "
    "is >= 2 hit-rate points on every tree-shaped workload and < 2 points on every plain shared-prefix one; "
    "does not hold when it is < 2 points on every tree-shaped workload; depends on the workload otherwise.",
    measure,
)
