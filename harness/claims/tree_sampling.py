"""Claim 22: multi-level tree generation is reused at every level, not only n > 1's one fan-out.

Two trees. The prompt tree: groups share a system prompt (the root), each question branches from
it, and each question is sampled n = 4 times (scripted replies that differ from their first token);
no generated text is reused there. The generated chain: users share a system prompt, each has its
own history, and each turn's generated answer becomes the next turn's prefix (multiturn), so the
reuse of generated text at a later level is counted. Each design's hit rate is compared with the
unbounded ideal at its own granularity, in one burst with each design's own front stage (the prompt tree), and one
request at a time (both; in a burst the chain's first turns would share the root within one step,
which only vLLM's scheduler reuses: claim 10's finding, not this claim's).
"""

from __future__ import annotations

import pandas as pd

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "22-tree_sampling"
SHARE = 0.95  # of the ideal hit rate at the design's granularity
DESIGNS = (APC, RADIX)
LOADS = {"burst": (), "one at a time": ("engine.max_num_seqs=1",)}
ANSWER = 32  # generated-chain answer length: its K/V is what the next turn may reuse


def _trees(ctx: Context) -> dict[str, tuple[str, ...]]:
    prompt_tree = (
        "workload=system_prompt",
        f"workload.num_groups={ctx.size(2, 8)}",
        f"workload.prompts_per_group={ctx.size(4, 8)}",
        "workload.system_prompt_len=1024",
        "workload.question_len=128",
        "workload.output_len=32",
        "workload.n=4",
    )
    generated_chain = (
        "workload=multiturn",
        f"workload.num_users={ctx.size(4, 8)}",
        "workload.num_rounds=3",
        "workload.system_prompt_len=1024",
        "workload.user_history_len=128",
        "workload.question_len=64",
        f"workload.answer_len={ANSWER}",
    )
    return {"prompt tree": prompt_tree, "generated chain": generated_chain}


def _generated_reused(requests: pd.DataFrame) -> int:
    """Cached tokens past the previous turn's prompt: the previous answer's K/V, reused."""
    later = requests[~requests["request_id"].str.endswith("-r0")]  # turn 2 on: u<user>-r<turn>
    previous_prompt = later["shared_prefix_len"] - (ANSWER - 1)
    return int((later["cached_tokens"] - previous_prompt).clip(lower=0).sum())


def measure(ctx: Context) -> Finding:
    rows: list[dict] = []
    for tree, over in _trees(ctx).items():
        for load, extra in LOADS.items():
            if tree == "generated chain" and load == "burst":
                continue  # the users' first turns would share the root within one step (claim 10)
            for d in DESIGNS:
                name = f"{d}-{tree.replace(' ', '_')}-{load.replace(' ', '_')}"
                arm = ctx.run(FOLDER, name, (*H100_8B, *over, *extra, *ARMS[d]))
                s = arm.summary
                hit, ideal = keys.value(s, keys.HIT_RATE), keys.value(s, keys.IDEAL_HIT_RATE)
                generated = _generated_reused(arm.requests) if tree == "generated chain" else None
                rows.append(
                    {
                        "tree": tree,
                        "load": load,
                        "design": d,
                        "hit_rate": hit,
                        "ideal": ideal,
                        "generated_reused": generated,
                    }
                )
    reached = {
        d: all(
            r["hit_rate"] >= SHARE * r["ideal"] and r["generated_reused"] != 0
            for r in rows
            if r["design"] == d
        )
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
        f"{r['tree']}, {r['design']} {r['load']}: {r['hit_rate']:.1%} of prompt tokens reused (ideal at its "
        f"granularity {r['ideal']:.1%})"
        + (
            f", {r['generated_reused']:,} generated tokens reused at a later level"
            if r["generated_reused"] is not None
            else ""
        )
        for r in rows
    ) + (
        ". Above the ideal: SGLang's n > 1 prefix request prefills each prompt outside the counted "
        "requests, so every counted sample hits it"
        if any(r["hit_rate"] > r["ideal"] + 1e-9 for r in rows)
        else ""
    )
    return Finding(
        setup="prompt tree: system_prompt, 1,024-token system prompts, 128-token questions, n = 4 samples "
        "per question (32 output tokens each; no generated text reused); generated chain: multiturn, "
        "1,024-token system prompt, 128-token history per user, 3 turns of 64-token questions and "
        f"{ANSWER}-token answers (each answer is the next turn's prefix); burst (each design's front stage, "
        "prompt tree only: a burst's same-step sharing is claim 10) and one request at a time; simulated H100 Llama-3.1-8B; one run per arm at seed 0 (the "
        "simulated runs repeat exactly at a seed)",
        measured="token hit rate per design against the unbounded ideal at the design's granularity; "
        "in the generated chain, cached tokens past the previous turn's prompt (its answer's K/V)",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Tree generation: reuse against the ideal",
            "hit rate (%)",
            {
                f"{tree}, {load}": {
                    **{
                        r["design"]: 100 * r["hit_rate"]
                        for r in rows
                        if (r["tree"], r["load"]) == (tree, load)
                    },
                    **{
                        f"{r['design']} ideal": 100 * r["ideal"]
                        for r in rows
                        if (r["tree"], r["load"]) == (tree, load)
                    },
                }
                for tree, load in dict.fromkeys((r["tree"], r["load"]) for r in rows)
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
    "on a prompt tree (root, branches, n = 4 samples) and on a generated chain (each answer the next turn's "
    "prefix) while reusing generated tokens there, one request at a time (and in one burst on the prompt "
    "tree); depends on the "
    "design when only one does; does not hold when neither does.",
    measure,
)
