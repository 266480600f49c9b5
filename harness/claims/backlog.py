"""Claim 14: with a backlog, cache-aware scheduling (longest prefix match, DFS weight) raises reuse.

Shared-system-prompt requests in shuffled order, all queued at once with few running slots, on
the radix cache and SGLang's scheduler: fcfs against lpm and dfs-weight. With a backlog the
waiting queue holds many groups at once, which is when the order of admission can follow the tree.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import H100_8B, RADIX, engine
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "14-backlog"
POINTS = 0.02
POLICIES = ("fcfs", "lpm", "dfs-weight")


def measure(ctx: Context) -> Finding:
    capacities = ctx.size((4096,), (4096, 16384))
    groups = ctx.size(8, 16)
    workload = (
        "workload=system_prompt",
        f"workload.num_groups={groups}",
        "workload.prompts_per_group=8",
        "workload.system_prompt_len=256",
        "workload.question_len=32",
        "workload.output_len=32",
        engine(RADIX),
        "engine.max_num_seqs=8",
    )
    rows = []
    for kv in capacities:
        row: dict = {"capacity": kv}
        for p in POLICIES:
            s = ctx.run(
                FOLDER,
                f"{p}-kv{kv}",
                (*H100_8B, *workload, f"engine.policy={p}", f"engine.kv_capacity_tokens={kv}"),
            ).summary
            row[p] = keys.value(s, keys.HIT_RATE)
        rows.append(row)
    ahead = [r[p] - r["fcfs"] >= POINTS for r in rows for p in ("lpm", "dfs-weight")]
    verdict = (
        HOLDS if all(ahead) else FAILS if not any(ahead) else depends("the policy and capacity")
    )
    result = "; ".join(
        f"{r['capacity']} KV tokens: " + ", ".join(f"{p} {r[p]:.1%}" for p in POLICIES)
        for r in rows
    )
    return Finding(
        setup=f"system_prompt: {groups} groups x 8 shuffled requests (256-token system prompt + 32), one burst, "
        f"8 running; radix + SGLang scheduler; KV {', '.join(map(str, capacities))} tokens; simulated H100 "
        "Llama-3.1-8B",
        measured="token hit rate per schedule policy",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Hit rate by schedule policy with a backlog",
            "hit rate (%)",
            {f"{r['capacity']} KV": {p: 100 * r[p] for p in POLICIES} for r in rows},
        ),
        details=rows,
    )


CLAIM = Claim(
    14,
    "backlog",
    "With a backlog of waiting requests, cache-aware scheduling (longest prefix match, DFS weight) raises "
    "the hit rate over first come, first served.",
    "SGLang paper, NeurIPS 2024 (cache-aware scheduling); SGLang schedule_policy.py",
    "Holds when both lpm and dfs-weight reach a hit rate >= 2 points above fcfs at every capacity, on "
    "radix with SGLang's scheduler, in one burst (a backlog) with 8 running requests; does not hold when "
    "neither does at any capacity; depends otherwise.",
    measure,
)
