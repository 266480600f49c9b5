"""Claim 8: vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.

Multi-turn conversations at a KV capacity that holds a few users' contexts: among the requests
whose reusable prefix was partly evicted, how many still found the shared system prompt; hits per
turn for apc with both free orders (everything else pinned) and for radix's LRU leaf eviction.
"""

from __future__ import annotations

import pandas as pd

from harness.claims.arms import ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Figure, Finding, undecided
from harness.claims.registry import claim
from harness.claims.requests import reusable_tokens

FOLDER = "8-free_order"
SURVIVAL = 0.9  # the head must survive in >= 90% of the requests that lost part of their prefix
SYSTEM_LEN = 256
# Pinned to v024's defaults so that the free order is the only difference between the apc arms.
PINNED = ("engine.reserve_full_prompt=true", "engine.async_scheduling=true")
VARIANTS = {
    "apc v024": (*ARMS["apc"], "engine.free_order=v024", *PINNED),
    "apc classic": (*ARMS["apc"], "engine.free_order=classic", *PINNED),
    "radix": ARMS["radix"],
}


@claim(
    8,
    "free_order",
    "vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.",
    "vLLM V1 prefix caching design doc (free_block_queue, reverse order on free)",
    "Holds when, for apc under both free orders, the shared system prompt is still reused by >= 90% of the "
    "requests that lost part of their reusable prefix to eviction; does not hold below that; undecided when "
    "the capacity evicted nothing.",
)
def measure(ctx: Context) -> Finding:
    users, rounds = ctx.size(8, 16), ctx.size(4, 6)
    workload = (
        "workload=multiturn",
        f"workload.num_users={users}",
        f"workload.num_rounds={rounds}",
        f"workload.system_prompt_len={SYSTEM_LEN}",
        "workload.user_history_len=128",
        "workload.question_len=32",
        "workload.answer_len=32",
        "engine.kv_capacity_tokens=2048",
        "engine.max_num_seqs=4",
    )
    rows = [
        _row(v, ctx.run(FOLDER, v.replace(" ", "-"), (*H100_8B, *workload, *o)).requests)
        for v, o in VARIANTS.items()
    ]
    apc = [r for r in rows if r["variant"].startswith("apc")]
    if any(r["lost_prefix"] == 0 for r in apc):
        verdict = undecided("the capacity evicted nothing that a later request needed")
    elif all(r["head_survival"] >= SURVIVAL for r in apc):
        verdict = HOLDS
    else:
        verdict = FAILS
    result = "; ".join(
        f"{r['variant']}: head kept in {r['head_survival']:.0%} of {r['lost_prefix']} partial misses, hit rate "
        f"{r['hit_rate']:.1%}, per turn " + "/".join(f"{h:.0%}" for h in r["per_turn"])
        for r in rows
    )
    diff = rows[0]["hit_rate"] - rows[1]["hit_rate"]
    return Finding(
        setup=f"multiturn: {users} users x {rounds} rounds, shared {SYSTEM_LEN}-token system prompt, 128-token history, "
        "32-token questions and answers; KV capacity 2,048 tokens, 4 running requests; simulated H100 Llama-3.1-8B",
        measured="share of partially-evicted requests that still hit the whole shared system prompt; hit rate per "
        "turn; apc v024 vs classic (reserve_full_prompt and async_scheduling pinned) and radix",
        result=result
        + f". The free order changes the hit rate by {100 * diff:+.1f} points (v024 - classic)",
        verdict=verdict,
        figure=Figure(
            "Hit rate per turn at a tight KV capacity",
            "hit rate (%)",
            {
                f"turn {t}": {r["variant"]: 100 * r["per_turn"][t] for r in rows}
                for t in range(rounds)
            },
        ),
        details=[{k: v for k, v in r.items() if k != "per_turn"} for r in rows],
    )


def _row(variant: str, df: pd.DataFrame) -> dict:
    head = (SYSTEM_LEN // 16) * 16  # block-aligned for apc; radix keeps more, never less
    reusable = reusable_tokens(df)
    lost = df[(df["cached_tokens"] < (reusable // 16) * 16) & (reusable >= head)]
    per_turn = df.groupby("turn").apply(
        lambda g: g["cached_tokens"].sum() / g["prompt_tokens"].sum(), include_groups=False
    )
    return {
        "variant": variant,
        "lost_prefix": len(lost),
        "head_survival": float((lost["cached_tokens"] >= head).mean())
        if len(lost)
        else float("nan"),
        "hit_rate": float(df["cached_tokens"].sum() / df["prompt_tokens"].sum()),
        "per_turn": per_turn.tolist(),
    }
