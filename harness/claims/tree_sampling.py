"""Claim 22: multi-level tree sampling is reused at every level, not only n > 1's one fan-out.

A three-level tree: groups share a system prompt (the root), each question branches from it, and
each question is sampled n = 4 times (scripted replies that differ from their first token). Each
design's hit rate is compared with the unbounded ideal at its own granularity, in one burst with
each design's own front stage, and one request at a time.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "22-tree_sampling"
SHARE = 0.95  # of the ideal hit rate at the design's granularity
DESIGNS = (APC, RADIX)
LOADS = {"burst": (), "one at a time": ("engine.max_num_seqs=1",)}


def measure(ctx: Context) -> Finding:
    over = (
        *H100_8B,
        "workload=system_prompt",
        f"workload.num_groups={ctx.size(2, 8)}",
        f"workload.prompts_per_group={ctx.size(4, 8)}",
        "workload.system_prompt_len=1024",
        "workload.question_len=128",
        "workload.output_len=32",
        "workload.n=4",
    )
    rows: list[dict] = []
    for load, extra in LOADS.items():
        for d in DESIGNS:
            name = f"{d}-{load.replace(' ', '_')}"
            s = ctx.run(FOLDER, name, (*over, *extra, *ARMS[d])).summary
            hit, ideal = keys.value(s, keys.HIT_RATE), keys.value(s, keys.IDEAL_HIT_RATE)
            rows.append({"load": load, "design": d, "hit_rate": hit, "ideal": ideal})
    reached = {
        d: all(r["hit_rate"] >= SHARE * r["ideal"] for r in rows if r["design"] == d)
        for d in DESIGNS
    }
    if all(reached.values()):
        verdict = HOLDS
    elif not any(reached.values()):
        verdict = FAILS
    else:
        verdict = depends(
            "the design: " + ", ".join(d for d, ok in reached.items() if ok) + " only"
        )
    result = "; ".join(
        f"{r['design']} {r['load']}: {r['hit_rate']:.1%} of prompt tokens reused (ideal at its "
        f"granularity {r['ideal']:.1%})"
        for r in rows
    ) + (
        ". Above the ideal: SGLang's n > 1 prefix request prefills each prompt outside the counted "
        "requests, so every counted sample hits it"
        if any(r["hit_rate"] > r["ideal"] + 1e-9 for r in rows)
        else ""
    )
    return Finding(
        setup="system_prompt as a three-level tree: 1,024-token system prompts, 128-token questions, "
        "n = 4 samples per question (32 output tokens each); burst (each design's front stage) and one "
        "request at a time; simulated H100 Llama-3.1-8B; deterministic runs (one seed)",
        measured="token hit rate per design against the unbounded ideal at the design's granularity",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Three-level tree: reuse against the ideal",
            "hit rate (%)",
            {
                load: {
                    **{r["design"]: 100 * r["hit_rate"] for r in rows if r["load"] == load},
                    **{f"{r['design']} ideal": 100 * r["ideal"] for r in rows if r["load"] == load},
                }
                for load in LOADS
            },
        ),
        details=rows,
    )


CLAIM = Claim(
    22,
    "tree_sampling",
    "Tree-structured generation (a shared root, branches, several samples of each) is reused at every "
    "level of the tree, beyond the one fan-out of n > 1 sampling.",
    "SGLang paper, NeurIPS 2024 (RadixAttention for tree-of-thought and branching programs); the article",
    "Holds when every design reaches at least 95% of the unbounded ideal hit rate at its own granularity "
    "on a three-level tree, in one burst and one request at a time; depends on the design when only one "
    "does; does not hold when neither does.",
    measure,
)
