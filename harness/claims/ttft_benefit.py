"""Claim 18: the main benefit of prefix caching is lower time to first token.

Measured on the real executor on this CPU (a real model forward, the wall clock): shared-system-
prompt traffic, caching on against off per design, paired by seed, under two loads: Poisson
arrivals (where throughput is pinned to the offered load, so it cannot move) and one burst (a
saturating load, where it can). Per seed, the TTFT gain (mean TTFT off / on) against the throughput
gain (total token throughput on / off) and the TPOT ratio; each load and design is decided on the
t-interval of log(TTFT gain / throughput gain) over the seeds, and the verdict sums them up.
"""

from __future__ import annotations

import math

from harness.claims import keys
from harness.claims.arms import APC, ARMS, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, UNSURE, Claim, Figure, Finding, sum_up
from harness.claims.strength import ABOVE, BELOW, STRADDLES, describe, interval, side
from harness.metrics.format import counted

FOLDER = "18-ttft_benefit"
DESIGNS = (APC, RADIX)
LOADS = {"Poisson 4 req/s": ("load.mode=poisson", "load.rate=4"), "burst": ()}
LOAD_NAMES = {"Poisson 4 req/s": "poisson", "burst": "burst"}  # run folder names
STATE = {ABOVE: HOLDS, BELOW: FAILS, STRADDLES: UNSURE}  # a design under a load


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
    )
    seeds = range(ctx.size(3, 4))
    rows = [_row(ctx, over, load, d, seeds) for load in LOADS for d in DESIGNS]
    states = {f"{r['design']} {r['load']}": STATE[r["side"]] for r in rows}
    verdict = sum_up("the load", states)
    result = "; ".join(
        f"{r['design']} {r['load']}: TTFT {r['ttft_gain']:.2f}x lower with caching, throughput "
        f"{r['throughput_gain']:.2f}x, TPOT {r['tpot_gain']:.2f}x (geometric means over "
        f"{counted(int(r['seeds']), 'seed')}); log(TTFT gain / throughput gain) {r['lead']}"
        for r in rows
    )
    return Finding(
        setup=f"real {model} on this CPU (wall clock), system_prompt: 2 groups x {ctx.size(4, 8)} prompts "
        "(512-token system prompt + 32), 16 output tokens; Poisson 4 req/s (throughput pinned to the "
        "offered load) and one burst (saturating: throughput can move); "
        f"{len(seeds)} paired seeds per design and load",
        measured="per seed: mean TTFT without / with caching, total token throughput with / without, "
        "mean TPOT without / with",
        result=result,
        verdict=verdict,
        figure=Figure(
            "What prefix caching improves (real executor, this CPU)",
            "gain with caching (x)",
            {
                f"{r['design']} {r['load']}": {
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
            f"{r['design']} {r['load']}: log(TTFT gain / throughput gain) {r['lead']}" for r in rows
        ),
    )


def _row(ctx: Context, over: tuple[str, ...], load: str, d: str, seeds: range) -> dict:
    """One design under one load: per-seed gains, their geometric means and the deciding side."""
    per_seed = []
    for seed in seeds:
        name = f"{d}-{LOAD_NAMES[load]}-seed{seed}"
        arm = (*over, *LOADS[load], f"seed={seed}")
        on = ctx.run(FOLDER, name, (*arm, *ARMS[d])).summary
        off_name = f"{d}-off-{LOAD_NAMES[load]}-seed{seed}"
        off = ctx.run(FOLDER, off_name, (*arm, *ARMS[f"{d}-off"])).summary
        per_seed.append(
            {
                "ttft": keys.value(off, "mean_ttft_ms") / keys.value(on, "mean_ttft_ms"),
                "throughput": keys.value(on, keys.THROUGHPUT) / keys.value(off, keys.THROUGHPUT),
                "tpot": keys.value(off, "mean_tpot_ms") / keys.value(on, "mean_tpot_ms"),
            }
        )
    lead = interval([math.log(p["ttft"] / p["throughput"]) for p in per_seed])
    return {
        "load": load,
        "design": d,
        "ttft_gain": _geo([p["ttft"] for p in per_seed]),
        "throughput_gain": _geo([p["throughput"] for p in per_seed]),
        "tpot_gain": _geo([p["tpot"] for p in per_seed]),
        "side": side(lead, 0.0),
        "lead": describe(lead),
        "seeds": len(per_seed),
    }


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


CLAIM = Claim(
    18,
    "ttft_benefit",
    "The main benefit of prefix caching is lower time to first token.",
    "the article; vLLM automatic prefix caching docs (skipping the shared prefill shortens TTFT)",
    "On the real executor (wall clock), per design and load (Poisson 4 req/s, where throughput is pinned "
    "to the offered load, and one burst, where it can move) over at least 3 paired seeds: holds when the "
    "95% t-interval of log(TTFT gain / throughput gain) lies above 0 for both designs under both loads "
    "(TTFT improves more than throughput); does not hold when it lies below 0 everywhere; depends on the "
    "load when one design and load holds and another does not; undecided (naming each) when an interval "
    "straddles 0. TPOT reported beside.",
    measure,
)
