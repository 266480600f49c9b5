"""Claim 13: under memory pressure the tree keeps multi-turn histories better than the hash table.

Multi-turn conversations (Poisson arrivals) at shrinking KV capacities: apc (block LRU, tail-first
freeing) against radix at page 1 (leaf LRU, token granularity) and radix at page 16 (leaf LRU at
apc's granularity), each with its own scheduler; the page-16 arm separates eviction policy from
granularity.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, H100_8B, RADIX, engine
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided

FOLDER = "13-eviction"
POINTS = 0.02
RADIX_P16 = f"{RADIX} p16"  # the tree at the hash cache's granularity
ARMS = {
    APC: (engine(APC),),
    f"{RADIX} p1": (engine(RADIX),),
    RADIX_P16: (engine(RADIX), "engine.block_size=16"),
}
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
    size = (f"workload.num_users={users}", f"workload.num_rounds={rounds}")
    rows = []
    for kv in capacities:
        row: dict = {"capacity": kv}
        for name, over in ARMS.items():
            s = ctx.run(
                FOLDER,
                f"{name.replace(' ', '')}-kv{kv}",
                (*H100_8B, *WORKLOAD, *size, *over, f"engine.kv_capacity_tokens={kv}"),
            ).summary
            row[name] = keys.value(s, keys.HIT_RATE)
            row[f"{name} evicted"] = int(keys.value(s, "evicted_tokens"))
        rows.append(row)
    evicting = [r for r in rows if r[f"{APC} evicted"] or r[f"{RADIX_P16} evicted"]]
    if not evicting:
        verdict = undecided("no capacity evicted anything")
    else:
        ahead = [r[RADIX_P16] - r[APC] >= POINTS for r in evicting]
        verdict = HOLDS if all(ahead) else FAILS if not any(ahead) else depends("the capacity")
    result = "; ".join(
        f"{r['capacity']} KV tokens: "
        + ", ".join(f"{a} {r[a]:.1%} ({r[a + ' evicted']:,} tokens evicted)" for a in ARMS)
        for r in rows
    )
    return Finding(
        setup=f"multiturn: {users} users x {rounds} rounds (256-token system prompt and history, 64-token "
        f"questions and answers), Poisson 20 req/s, 8 running; KV {', '.join(map(str, capacities))} tokens; "
        "simulated H100 Llama-3.1-8B",
        measured="token hit rate and evictions per arm and capacity",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Multi-turn hit rate under memory pressure",
            "hit rate (%)",
            {f"{r['capacity']} KV": {a: 100 * r[a] for a in ARMS} for r in rows},
        ),
        details=rows,
    )


CLAIM = Claim(
    13,
    "eviction",
    "Under memory pressure, the radix tree's leaf LRU keeps multi-turn histories better than APC's "
    "block LRU.",
    "SGLang RadixAttention (LMSYS blog, January 2024: LRU eviction of leaves)",
    "Holds when radix at page 16 (same granularity as apc) has a hit rate >= 2 points above apc at every "
    "capacity that evicts; does not hold when it is < 2 points above at every such capacity; depends on "
    "the capacity otherwise; undecided when nothing is evicted. Radix page 1 is reported as granularity.",
    measure,
)
