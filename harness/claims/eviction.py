"""Claim 13: under memory pressure the tree keeps multi-turn histories better than the hash table.

Multi-turn conversations (Poisson arrivals) at shrinking KV capacities: apc (block LRU, tail-first
freeing) against radix at page 1 (leaf LRU, token granularity) and radix at page 16 (leaf LRU at
apc's granularity), each with its own scheduler, and radix page 16 under vLLM's scheduler, the
arm the verdict is decided on (only the data structure differs from apc). Every cell runs several
seeds; the verdict rests on the interval of the tree's lead, never on one seed.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, H100_8B, RADIX, cross, engine
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided
from harness.claims.strength import ABOVE, BELOW, STRADDLES, describe, interval, side
from harness.metrics.format import counted

FOLDER = "13-eviction"
POINTS = 0.02
ARMS = {
    APC: (f"{engine(APC)}",),
    f"{RADIX} p1": (f"{engine(RADIX)}",),
    f"{RADIX} p16": (f"{engine(RADIX)}", "engine.block_size=16"),
    # the tree under vLLM's scheduler, at apc's granularity: only the data structure differs
    f"{RADIX} p16+vllm": (f"{engine(RADIX, cross(RADIX))}", "engine.block_size=16"),
}
MATCHED, OWN = f"{RADIX} p16+vllm", f"{RADIX} p16"
WORKLOAD = (
    "workload=multiturn",
    "workload.system_prompt_len=256",
    "workload.user_history_len=256",
    "workload.question_len=64",
    "workload.answer_len=64",
    "load.mode=poisson",
    "load.rate=20",
    "engine.max_num_seqs=8",
)


def measure(ctx: Context) -> Finding:
    users, rounds = ctx.size(8, 16), ctx.size(4, 6)
    capacities = ctx.size((2048, 4096), (2048, 3072, 4096, 8192))
    seeds = range(ctx.size(3, 4))
    size = (f"workload.num_users={users}", f"workload.num_rounds={rounds}")
    rows = [_capacity_row(ctx, kv, size, seeds) for kv in capacities]
    evicting = [r for r in rows if r["evicted"]]
    verdict = _verdict(evicting)
    result = "; ".join(_describe(r) for r in rows)
    deciding = ", ".join(f"{r['capacity']}: {r['matched_text']}" for r in evicting)
    return Finding(
        setup=f"multiturn: {users} users x {rounds} rounds (256-token system prompt and history, 64-token "
        f"questions and answers), Poisson 20 req/s, 8 running; KV {', '.join(map(str, capacities))} tokens; "
        f"{counted(len(seeds), 'seed')} per cell; simulated H100 Llama-3.1-8B; decided under one scheduler (vLLM's), "
        "each design's own scheduler reported beside",
        measured=f"token hit rate and evictions per arm, capacity and seed; the tree's lead over {APC} per "
        f"seed ({RADIX} page 16 under vLLM's scheduler minus {APC}) with its 95% t-interval",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Multi-turn hit rate under memory pressure (mean over seeds)",
            "hit rate (%)",
            {f"{r['capacity']} KV": {a: 100 * r[a] for a in ARMS} for r in rows},
        ),
        details=rows,
        interval=f"tree lead in points per evicting capacity: {deciding}" if deciding else "",
    )


def _capacity_row(ctx: Context, kv: int, size: tuple[str, ...], seeds: range) -> dict:
    """Mean hit rate per arm at one capacity, and the tree's per-seed lead over apc under the
    matched scheduler and under its own."""
    rates: dict[str, list[float]] = {a: [] for a in ARMS}
    evicted = 0
    for seed in seeds:
        for name, over in ARMS.items():
            s = ctx.run(
                FOLDER,
                f"{name.replace(' ', '').replace('+', '-')}-kv{kv}-seed{seed}",
                (
                    *H100_8B,
                    *WORKLOAD,
                    *size,
                    *over,
                    f"engine.kv_capacity_tokens={kv}",
                    f"seed={seed}",
                ),
            ).summary
            rates[name].append(keys.value(s, keys.HIT_RATE))
            evicted += int(keys.value(s, "evicted_tokens"))
    matched = interval([t - a for t, a in zip(rates[MATCHED], rates[APC])])
    own = interval([t - a for t, a in zip(rates[OWN], rates[APC])])
    row: dict = {"capacity": kv, "evicted": evicted, "seeds": len(seeds)}
    row |= {a: sum(v) / len(v) for a, v in rates.items()}
    row |= {
        "matched_side": side(matched, POINTS),
        "matched_text": describe(matched, 100, " points"),
        "own_side": side(own, POINTS),
        "own_text": describe(own, 100, " points"),
    }
    return row


def _verdict(evicting: list[dict]) -> str:
    """Pre-registered: per evicting capacity the matched-scheduler lead's interval is above 2
    points, below, or straddles; holds when above at every one, does not hold when below at
    every one, depends on the capacity when each is decided and they differ."""
    if not evicting:
        return undecided("no capacity evicted anything")
    sides = {r["matched_side"] for r in evicting}
    if STRADDLES in sides:
        return undecided(
            "the tree's lead straddles 2 points at some capacity (more seeds would decide)"
        )
    if sides == {ABOVE}:
        return HOLDS
    if sides == {BELOW}:
        return FAILS
    return depends("the capacity")


def _describe(r: dict) -> str:
    rates = ", ".join(f"{a} {r[a]:.1%}" for a in ARMS)
    return (
        f"{r['capacity']} KV tokens ({r['evicted']:,} tokens evicted over all runs): {rates}; tree lead "
        f"under vLLM's scheduler {r['matched_text']}, under its own {r['own_text']}"
    )


CLAIM = Claim(
    13,
    "eviction",
    f"Under memory pressure, the {RADIX} tree's leaf LRU keeps multi-turn histories better than APC's "
    "block LRU.",
    "SGLang RadixAttention (LMSYS blog, January 2024: LRU eviction of leaves)",
    f"Decided on the data structure alone: {RADIX} at page 16 ({APC}'s granularity) under vLLM's scheduler "
    f"against {APC}, per seed (at least 3 seeds), at every capacity that evicts. Holds when the 95% "
    "t-interval of the tree's lead lies at or above 2 points at every such capacity; does not hold when "
    "it lies below 2 points at every one; depends on the capacity when each capacity is decided and they "
    "differ; undecided when any interval straddles 2 points or nothing is evicted. Radix under SGLang's "
    f"scheduler (the scheduler's part) and {RADIX} page 1 (granularity) are reported beside.",
    measure,
)
