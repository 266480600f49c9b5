"""Claim 18: the main benefit of prefix caching is lower time to first token.

Measured on the real executor on this CPU (a real model forward, the wall clock): shared-system-
prompt traffic, caching on against off per design, paired by seed. Per seed, the TTFT gain
(mean TTFT off / on) against the throughput gain (total token throughput on / off) and the TPOT
ratio; the verdict rests on the t-interval of log(TTFT gain / throughput gain) over the seeds.
"""

from __future__ import annotations

import math

from harness.claims import keys
from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends, undecided
from harness.claims.strength import ABOVE, BELOW, describe, interval, side
from harness.metrics.format import counted

FOLDER = "18-ttft_benefit"
DESIGNS = (APC, RADIX)


def measure(ctx: Context) -> Finding:
    model = ctx.size("tiny", "s")
    over = (
        "executor=real",
        f"model={model}",
        "workload=system_prompt",
        "workload.num_groups=2",
        f"workload.prompts_per_group={ctx.size(4, 8)}",
        "workload.system_prompt_len=512",
        "workload.question_len=32",
        "workload.output_len=16",
        "load.mode=poisson",
        "load.rate=4",
    )
    seeds = range(ctx.size(3, 4))
    rows: list[dict] = []
    for d in DESIGNS:
        per_seed = []
        for seed in seeds:
            on = ctx.run(FOLDER, f"{d}-seed{seed}", (*over, *ARMS[d], f"seed={seed}")).summary
            off = ctx.run(
                FOLDER, f"{d}-off-seed{seed}", (*over, *ARMS[f"{d}-off"], f"seed={seed}")
            ).summary
            per_seed.append(
                {
                    "ttft": keys.value(off, "mean_ttft_ms") / keys.value(on, "mean_ttft_ms"),
                    "throughput": keys.value(on, keys.THROUGHPUT)
                    / keys.value(off, keys.THROUGHPUT),
                    "tpot": keys.value(off, "mean_tpot_ms") / keys.value(on, "mean_tpot_ms"),
                }
            )
        lead = interval([math.log(p["ttft"] / p["throughput"]) for p in per_seed])
        rows.append(
            {
                "design": d,
                "ttft_gain": _geo([p["ttft"] for p in per_seed]),
                "throughput_gain": _geo([p["throughput"] for p in per_seed]),
                "tpot_gain": _geo([p["tpot"] for p in per_seed]),
                "side": side(lead, 0.0),
                "lead": describe(lead),
                "seeds": len(per_seed),
            }
        )
    verdict = _verdict([r["side"] for r in rows])
    result = "; ".join(
        f"{r['design']}: TTFT {r['ttft_gain']:.2f}x lower with caching, throughput {r['throughput_gain']:.2f}x, "
        f"TPOT {r['tpot_gain']:.2f}x (geometric means over {counted(int(r['seeds']), 'seed')}); log(TTFT gain / throughput "
        f"gain) {r['lead']}"
        for r in rows
    )
    return Finding(
        setup=f"real {model} on this CPU (wall clock), system_prompt: 2 groups x {ctx.size(4, 8)} prompts "
        "(512-token system prompt + 32), 16 output tokens, Poisson 4 req/s; "
        f"{len(seeds)} paired seeds per design",
        measured="per seed: mean TTFT without / with caching, total token throughput with / without, "
        "mean TPOT without / with",
        result=result,
        verdict=verdict,
        figure=Figure(
            "What prefix caching improves (real executor, this CPU)",
            "gain with caching (x)",
            {
                r["design"]: {
                    "TTFT": r["ttft_gain"],
                    "throughput": r["throughput_gain"],
                    "TPOT": r["tpot_gain"],
                }
                for r in rows
            },
            reference=1.0,
        ),
        details=rows,
        interval="; ".join(
            f"{r['design']}: log(TTFT gain / throughput gain) {r['lead']}" for r in rows
        ),
    )


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _verdict(sides: list[str]) -> str:
    if all(s == ABOVE for s in sides):
        return HOLDS
    if all(s == BELOW for s in sides):
        return FAILS
    if ABOVE in sides and BELOW in sides:
        return depends("the design")
    return undecided("the interval straddles equal gains for a design (more seeds would decide)")


CLAIM = Claim(
    18,
    "ttft_benefit",
    "The main benefit of prefix caching is lower time to first token.",
    "the article; vLLM automatic prefix caching docs (skipping the shared prefill shortens TTFT)",
    "On the real executor (wall clock), per design over at least 3 paired seeds: holds when the 95% "
    "t-interval of log(TTFT gain / throughput gain) lies above 0 for both designs (TTFT improves more than "
    "throughput); does not hold when it lies below 0 for both; depends on the design when they split; "
    "undecided when an interval straddles 0. TPOT reported beside.",
    measure,
)
