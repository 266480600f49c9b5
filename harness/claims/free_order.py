"""Claim 8: vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.

Multi-turn conversations at KV capacities that hold only a few users' contexts: among the requests
whose reusable prefix was partly evicted, how many still found the shared system prompt; hit rate
(overall and per turn) for apc with both free orders (everything else pinned) and for radix's LRU
leaf eviction, at each capacity.
"""

from __future__ import annotations

import pandas as pd

from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided
from harness.claims.requests import reusable_tokens

FOLDER = "8-free_order"
SURVIVAL = 0.9  # the head must survive in >= 90% of the requests that lost part of their prefix
SYSTEM_LEN = 256
CAPACITIES = (1024, 1536, 2048, 3072)  # KV tokens; one user's last turn needs up to ~800
MECHANISM = 0.01  # tail-first must beat the head-first control by 1 point somewhere
# Pinned to v024's defaults so that the free order is the only difference between the apc arms.
PINNED = ("engine.reserve_full_prompt=true", "engine.async_scheduling=true")
V024, CLASSIC, HEAD_FIRST = f"{APC} v024", f"{APC} classic", f"{APC} head-first"
VARIANTS = {
    V024: (*ARMS[APC], "engine.free_order=v024", *PINNED),
    CLASSIC: (*ARMS[APC], "engine.free_order=classic", *PINNED),
    # the counterfactual control: same pool, each table freed head first
    HEAD_FIRST: (
        *ARMS[APC],
        "engine.free_order=v024",
        *PINNED,
        "engine.free_direction=head_first",
    ),
    RADIX: ARMS[RADIX],
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


CLAIM = Claim(
    8,
    "free_order",
    "vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.",
    "vLLM V1 prefix caching design doc (free_block_queue, reverse order on free)",
    "Holds when, for apc tail-first under both free orders and at every capacity, the shared system prompt "
    "is still reused by >= 90% of the requests that lost part of their reusable prefix to eviction, and "
    "against the head-first control (same pool, tables freed head first) tail-first keeps more at one "
    "capacity at least: head survival or per-user-history reuse (the share of each user's own earlier "
    "turns, past the system prompt, that later turns reuse) higher by >= 1 point; does not hold when "
    "tail-first's head survival is below 90%; undecided when no capacity evicted anything a later request "
    "needed, or when head-first does as well everywhere (this workload cannot tell the mechanism).",
    measure,
)


def _verdict(rows: list[dict]) -> str:
    tail = [r for r in rows if r["variant"] in (V024, CLASSIC) and r["lost_prefix"]]
    if not tail:
        return undecided("no capacity evicted anything that a later request needed")
    if not all(r["head_survival"] >= SURVIVAL for r in tail):
        return FAILS
    by = {(r["variant"], r["capacity"]): r for r in rows}
    gains = [
        max(
            _nan0(by[V024, c]["head_survival"]) - _nan0(by[HEAD_FIRST, c]["head_survival"]),
            by[V024, c]["history_reuse"] - by[HEAD_FIRST, c]["history_reuse"],
        )
        for c in CAPACITIES
    ]
    if max(gains) < MECHANISM:
        return undecided("the head-first control does as well at every capacity")
    return HOLDS


def _nan0(x: float) -> float:
    return 0.0 if x != x else x


def _describe(rows: list[dict]) -> str:
    parts = []
    for c in CAPACITIES:
        at = {r["variant"]: r for r in rows if r["capacity"] == c}
        text = "; ".join(
            f"{v} head kept in {r['head_survival']:.0%} of {r['lost_prefix']} partial misses, own history "
            f"reused {r['history_reuse']:.1%}, hit rate {r['hit_rate']:.1%} (per turn "
            f"{'/'.join(f'{h:.0%}' for h in r['per_turn'])})"
            for v, r in at.items()
        )
        diff = at[V024]["hit_rate"] - at[CLASSIC]["hit_rate"]
        ctl = at[V024]["history_reuse"] - at[HEAD_FIRST]["history_reuse"]
        parts.append(
            f"{c} KV tokens: {text}; v024 - classic {100 * diff:+.1f} points; own history tail-first - "
            f"head-first {100 * ctl:+.1f} points"
        )
    return ". ".join(parts)


def _row(variant: str, capacity: int, df: pd.DataFrame) -> dict:
    head = (SYSTEM_LEN // 16) * 16  # block-aligned for apc; radix keeps more, never less
    reusable = reusable_tokens(df)
    lost = df[(df["cached_tokens"] < (reusable // 16) * 16) & (reusable >= head)]
    per_turn = df.groupby("turn")[["cached_tokens", "prompt_tokens"]].sum()
    survival = float((lost["cached_tokens"] >= head).mean()) if len(lost) else float("nan")
    # each user's own history: the reusable tokens past the shared system prompt, in later turns
    later = df[df["turn"] > 0]
    own = (reusable[later.index] - head).clip(lower=0)
    kept = (later["cached_tokens"] - head).clip(lower=0).clip(upper=own)
    history = float(kept.sum() / own.sum()) if own.sum() else float("nan")
    return {
        "variant": variant,
        "capacity": capacity,
        "lost_prefix": len(lost),
        "head_survival": survival,
        "history_reuse": history,
        "hit_rate": float(df["cached_tokens"].sum() / df["prompt_tokens"].sum()),
        "per_turn": (per_turn["cached_tokens"] / per_turn["prompt_tokens"]).tolist(),
    }
