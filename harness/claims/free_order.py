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
from harness.claims.record import FAILS, HOLDS, UNSURE, Claim, Figure, Finding, sum_up, undecided
from harness.claims.requests import reusable_tokens
from harness.claims.strength import ABOVE, BELOW, describe, interval, side
from harness.metrics.format import counted
from harness.report.stats import MeanCI

FOLDER = "8-free_order"
SURVIVAL = 0.9  # the head must survive in >= 90% of the requests that lost part of their prefix
SYSTEM_LEN = 256
CAPACITIES = (1024, 1536, 2048, 3072)  # KV tokens; one user's last turn needs up to ~800
MECHANISM = 0.01  # tail-first must beat the head-first control by 1 point somewhere
BURST, POISSON = "burst", "Poisson 20 req/s"
LOADS = {BURST: (), POISSON: ("load.mode=poisson", "load.rate=20")}
# Pinned to v024's defaults so that the free order is the only difference between the apc arms.
PINNED = ("engine.reserve_full_prompt=true", "engine.async_scheduling=true")
VARIANTS = {
    f"{APC} v024": (*ARMS[APC], "engine.free_order=v024", *PINNED),
    f"{APC} classic": (*ARMS[APC], "engine.free_order=classic", *PINNED),
    # the counterfactual control: same pool, each table freed head first
    f"{APC} head-first": (
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
    per_load = {
        load: _load_rows(ctx, load, workload, range(_num_seeds(ctx, load))) for load in LOADS
    }
    rows = [r | {"load": load} for load, (pooled, _) in per_load.items() for r in pooled]
    gains = {load: g for load, (_, g) in per_load.items()}
    burst_rows = per_load[BURST][0]
    return Finding(
        setup=f"multiturn: {users} users x {rounds} rounds, shared {SYSTEM_LEN}-token system prompt, 128-token "
        f"history, 32-token questions and answers; KV capacity {', '.join(map(str, CAPACITIES))} tokens, 4 running "
        f"requests; one burst (deterministic: every seed gives the same run, so one) and Poisson 20 req/s "
        f"({counted(_num_seeds(ctx, POISSON), 'seed')}); simulated H100 Llama-3.1-8B",
        measured="share of partially-evicted requests that still hit the whole shared system prompt; hit rate "
        f"overall and per turn; {APC} v024 vs classic (reserve_full_prompt and async_scheduling pinned) and {RADIX}",
        result=". ".join(
            f"{load}: {_describe(pooled, gains[load])}" for load, (pooled, _) in per_load.items()
        ),
        verdict=_verdict(rows, gains),
        figure=Figure(
            "Hit rate at tight KV capacities",
            "hit rate (%)",
            {
                f"{c} KV tokens": {
                    r["variant"]: 100 * r["hit_rate"] for r in burst_rows if r["capacity"] == c
                }
                for c in CAPACITIES
            },
        ),
        details=rows,
        interval="tail-first's lead over head-first per capacity: "
        + "; ".join(
            f"{load}: " + ", ".join(f"{c}: {describe(ci, 100, ' points')}" for c, ci in g.items())
            for load, g in gains.items()
        ),
    )


def _num_seeds(ctx: Context, load: str) -> int:
    return 1 if load == BURST else ctx.size(3, 4)


def _load_rows(
    ctx: Context, load: str, workload: tuple[str, ...], seeds: range
) -> tuple[list[dict], dict[int, MeanCI]]:
    """The pooled rows and the per-capacity lead of one load, over its seeds."""
    tag = "" if load == BURST else "-poisson"
    per_seed = [
        _row(
            v,
            capacity,
            ctx.run(
                FOLDER,
                f"{v.replace(' ', '-')}-kv{capacity}{tag}{f'-seed{seed}' if tag else ''}",
                (
                    *H100_8B,
                    *workload,
                    *LOADS[load],
                    *o,
                    f"engine.kv_capacity_tokens={capacity}",
                    *([f"seed={seed}"] if tag else []),
                ),
            ).requests,
        )
        | {"seed": seed}
        for seed in seeds
        for capacity in CAPACITIES
        for v, o in VARIANTS.items()
    ]
    return _pooled(per_seed), _gains(per_seed)


CLAIM = Claim(
    8,
    "free_order",
    "vLLM frees a finished request's blocks tail first, so shared heads outlive personal tails.",
    "vLLM V1 prefix caching design doc (free_block_queue, reverse order on free)",
    f"Holds when, for {APC} tail-first under both free orders and at every capacity, the shared system prompt "
    "is still reused by >= 90% of the requests that lost part of their reusable prefix to eviction, and "
    "against the head-first control (same pool, tables freed head first) tail-first keeps more at one "
    "capacity at least: head survival or per-user-history reuse (the share of each user's own earlier "
    "turns, past the system prompt, that later turns reuse) higher by >= 1 point, under both loads: one "
    "burst (deterministic, the exact lead) and Poisson 20 req/s (the 95% t-interval over at least 3 seeds "
    "wholly at or above 1 point). Does not hold when tail-first's head survival (pooled over seeds) is "
    "below 90%; depends on the load when the lead shows under one load and is shown absent under the other "
    "(the burst's exact lead under 1 point, or every Poisson interval wholly under it); undecided when the "
    "other load's interval straddles 1 point (each load named), when no capacity evicted anything a later "
    "request needed, or when the lead shows under neither load.",
    measure,
)


def _verdict(rows: list[dict], gains: dict[str, dict[int, MeanCI]]) -> str:
    tail = [
        r for r in rows if r["variant"] in (f"{APC} v024", f"{APC} classic") and r["lost_prefix"]
    ]
    if not tail:
        return undecided("no capacity evicted anything that a later request needed")
    if not all(r["head_survival"] >= SURVIVAL for r in tail):
        return FAILS
    states = {load: _state(load, g) for load, g in gains.items()}
    if HOLDS not in states.values():
        return undecided("the head-first control does as well under both loads")
    # a load where the lead's interval straddles 1 point is undecided there, not a failure
    return sum_up("the load (tail-first's lead over the head-first control)", states)


def _state(load: str, by_capacity: dict[int, MeanCI]) -> str:
    """HOLDS when the lead shows at one capacity at least; FAILS when it is shown absent (the
    burst's exact lead under the mark, or every Poisson interval wholly under it); else UNSURE."""
    if any(_shows(load, ci) for ci in by_capacity.values()):
        return HOLDS
    if load == BURST or all(side(ci, MECHANISM) == BELOW for ci in by_capacity.values()):
        return FAILS
    return UNSURE


def _shows(load: str, ci: MeanCI) -> bool:
    """The lead reaches MECHANISM: exactly for the deterministic burst, by the interval's low
    end (at least 3 seeds) under Poisson arrivals."""
    if load == BURST:
        return ci.mean >= MECHANISM
    return side(ci, MECHANISM) == ABOVE


def _gains(per_seed: list[dict]) -> dict[int, MeanCI]:
    """Per capacity, the per-seed lead of tail-first (v024) over the head-first control: the
    larger of head survival and own-history reuse, in rate units."""
    by = {(r["variant"], r["capacity"], r["seed"]): r for r in per_seed}
    seeds = sorted({r["seed"] for r in per_seed})
    return {
        c: interval(
            [
                max(
                    _nan0(by[f"{APC} v024", c, s]["head_survival"])
                    - _nan0(by[f"{APC} head-first", c, s]["head_survival"]),
                    _nan0(by[f"{APC} v024", c, s]["history_reuse"])
                    - _nan0(by[f"{APC} head-first", c, s]["history_reuse"]),
                )
                for s in seeds
            ]
        )
        for c in CAPACITIES
    }


def _pooled(per_seed: list[dict]) -> list[dict]:
    """One row per variant and capacity over the seeds: head survival pooled over every partial
    miss, the rates averaged, per-turn rates averaged turn by turn."""
    out = []
    keys = dict.fromkeys((r["variant"], r["capacity"]) for r in per_seed)
    for variant, capacity in keys:
        rs = [r for r in per_seed if r["variant"] == variant and r["capacity"] == capacity]
        lost = sum(r["lost_prefix"] for r in rs)
        kept = sum(_nan0(r["head_survival"]) * r["lost_prefix"] for r in rs)
        turns = min(len(r["per_turn"]) for r in rs)
        out.append(
            {
                "variant": variant,
                "capacity": capacity,
                "seeds": len(rs),
                "lost_prefix": lost,
                "head_survival": kept / lost if lost else float("nan"),
                "history_reuse": _mean([r["history_reuse"] for r in rs]),
                "hit_rate": _mean([r["hit_rate"] for r in rs]),
                "per_turn": [_mean([r["per_turn"][t] for r in rs]) for t in range(turns)],
            }
        )
    return out


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v == v]
    return sum(finite) / len(finite) if finite else float("nan")


def _nan0(x: float) -> float:
    return 0.0 if x != x else x


def _describe(rows: list[dict], gains: dict[int, MeanCI]) -> str:
    parts = []
    for c in CAPACITIES:
        at = {r["variant"]: r for r in rows if r["capacity"] == c}
        text = "; ".join(
            f"{v} head kept in {r['head_survival']:.0%} of {r['lost_prefix']} partial misses, own history "
            f"reused {r['history_reuse']:.1%}, hit rate {r['hit_rate']:.1%} (per turn "
            f"{'/'.join(f'{h:.0%}' for h in r['per_turn'])})"
            for v, r in at.items()
        )
        diff = at[f"{APC} v024"]["hit_rate"] - at[f"{APC} classic"]["hit_rate"]
        ctl = at[f"{APC} v024"]["history_reuse"] - at[f"{APC} head-first"]["history_reuse"]
        parts.append(
            f"{c} KV tokens: {text}; v024 - classic {100 * diff:+.1f} points; own history tail-first - "
            f"head-first {100 * ctl:+.1f} points; tail-first's lead (per seed) "
            f"{describe(gains[c], 100, ' points')}"
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
