"""Claim 8: vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.

Multi-turn conversations at KV capacities that hold only a few users' contexts: among the requests
whose reusable prefix was partly evicted, how many still found the shared system prompt; hit rate
(overall and per turn) for apc with both free orders (everything else pinned) and for radix's LRU
leaf eviction, at each capacity.
"""

from __future__ import annotations

import pandas as pd

from harness.claims.arms import ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.claims.requests import reusable_tokens

FOLDER = "8-free_order"
SURVIVAL = 0.9  # the head must survive in >= 90% of the requests that lost part of their prefix
SYSTEM_LEN = 256
CAPACITIES = (1536, 2048, 3072)  # KV tokens; one user's last turn needs up to ~800
# Pinned to v024's defaults so that the free order is the only difference between the apc arms.
PINNED = ("engine.reserve_full_prompt=true", "engine.async_scheduling=true")
VARIANTS = {
    "apc v024": (*ARMS["apc"], "engine.free_order=v024", *PINNED),
    "apc classic": (*ARMS["apc"], "engine.free_order=classic", *PINNED),
    "radix": ARMS["radix"],
}


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
        "engine.max_num_seqs=4",
    )
    rows = [
        _row(
            v,
            capacity,
            ctx.run(
                FOLDER,
                f"{v.replace(' ', '-')}-kv{capacity}",
                (*H100_8B, *workload, *o, f"engine.kv_capacity_tokens={capacity}"),
            ).requests,
        )
        for capacity in CAPACITIES
        for v, o in VARIANTS.items()
    ]
    return Finding(
        setup=f"multiturn: {users} users x {rounds} rounds, shared {SYSTEM_LEN}-token system prompt, 128-token "
        f"history, 32-token questions and answers; KV capacity {', '.join(map(str, CAPACITIES))} tokens, 4 running "
        "requests; simulated H100 Llama-3.1-8B",
        measured="share of partially-evicted requests that still hit the whole shared system prompt; hit rate "
        "overall and per turn; apc v024 vs classic (reserve_full_prompt and async_scheduling pinned) and radix",
        result=_describe(rows),
        verdict=_verdict(rows),
        figure=Figure(
            "Hit rate at tight KV capacities",
            "hit rate (%)",
            {
                f"{c} KV tokens": {
                    r["variant"]: 100 * r["hit_rate"] for r in rows if r["capacity"] == c
                }
                for c in CAPACITIES
            },
        ),
        details=rows,
    )


def _verdict(rows: list[dict]) -> str:
    apc = [r for r in rows if r["variant"].startswith("apc") and r["lost_prefix"]]
    if not apc:
        return undecided("no capacity evicted anything that a later request needed")
    return HOLDS if all(r["head_survival"] >= SURVIVAL for r in apc) else FAILS


def _describe(rows: list[dict]) -> str:
    parts = []
    for c in CAPACITIES:
        at = {r["variant"]: r for r in rows if r["capacity"] == c}
        text = "; ".join(
            f"{v} head kept in {r['head_survival']:.0%} of {r['lost_prefix']} partial misses, hit rate "
            f"{r['hit_rate']:.1%} (per turn {'/'.join(f'{h:.0%}' for h in r['per_turn'])})"
            for v, r in at.items()
        )
        diff = at["apc v024"]["hit_rate"] - at["apc classic"]["hit_rate"]
        parts.append(f"{c} KV tokens: {text}; v024 - classic {100 * diff:+.1f} points")
    return ". ".join(parts)


def _row(variant: str, capacity: int, df: pd.DataFrame) -> dict:
    head = (SYSTEM_LEN // 16) * 16  # block-aligned for apc; radix keeps more, never less
    reusable = reusable_tokens(df)
    lost = df[(df["cached_tokens"] < (reusable // 16) * 16) & (reusable >= head)]
    per_turn = df.groupby("turn")[["cached_tokens", "prompt_tokens"]].sum()
    survival = float((lost["cached_tokens"] >= head).mean()) if len(lost) else float("nan")
    return {
        "variant": variant,
        "capacity": capacity,
        "lost_prefix": len(lost),
        "head_survival": survival,
        "hit_rate": float(df["cached_tokens"].sum() / df["prompt_tokens"].sum()),
        "per_turn": (per_turn["cached_tokens"] / per_turn["prompt_tokens"]).tolist(),
    }


CLAIM = Claim(
    8,
    "free_order",
    "vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.",
    "vLLM V1 prefix caching design doc (free_block_queue, reverse order on free)",
    "Holds when, for apc under both free orders and at every capacity, the shared system prompt is still "
    "reused by >= 90% of the requests that lost part of their reusable prefix to eviction; does not hold "
    "below that; undecided when no capacity evicted anything a later request needed.",
    measure,
)
