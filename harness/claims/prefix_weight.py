"""Claim 17, as the article states it: the heavier the shared prefix, the bigger SGLang's gap over vLLM.

The same system-prompt traffic with a shared prefix of growing length (the question and output
fixed), on the simulated H100 8B preset: the gap is apc's mean TTFT over radix's under low-rate
Poisson arrivals (TTFT is then prefill, not queueing: the verdict), with radix's burst throughput
over apc's beside it. Each design's caching on / off gain on the same runs is reported beside too
(the earlier, restated form of the claim).
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B, RADIX
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "17-prefix_weight"
STEP = 1.05  # each longer prefix must raise the gain by at least 5%
DESIGNS = (APC, RADIX)
LOADS = {"poisson": ("load.mode=poisson", "load.rate=2"), "burst": ()}


def measure(ctx: Context) -> Finding:
    lengths = ctx.size((256, 2048), (256, 1024, 4096))
    groups, per_group = ctx.size(4, 16), ctx.size(4, 8)
    rows = []
    for length in lengths:
        over = (
            *H100_8B,
            "workload=system_prompt",
            f"workload.num_groups={groups}",
            f"workload.prompts_per_group={per_group}",
            f"workload.system_prompt_len={length}",
            "workload.question_len=128",
            "workload.output_len=32",
        )
        row: dict = {"prefix_len": length}
        for d in DESIGNS:
            runs = {
                (load, arm): ctx.run(
                    FOLDER, f"{arm}-{load}-s{length}", (*over, *LOADS[load], *ARMS[arm])
                ).summary
                for load in LOADS
                for arm in (d, f"{d}-off")
            }
            on, off = runs["poisson", d], runs["poisson", f"{d}-off"]
            row[d] = keys.value(off, "mean_ttft_ms") / keys.value(on, "mean_ttft_ms")
            burst_on, burst_off = runs["burst", d], runs["burst", f"{d}-off"]
            row[f"{d} throughput"] = keys.value(burst_on, keys.THROUGHPUT) / keys.value(
                burst_off, keys.THROUGHPUT
            )
            row[f"{d} ttft_ms"] = keys.value(on, "mean_ttft_ms")
            row[f"{d} tok/s"] = keys.value(burst_on, keys.THROUGHPUT)
        row["gap"] = row[f"{APC} ttft_ms"] / row[f"{RADIX} ttft_ms"]
        row["gap throughput"] = row[f"{RADIX} tok/s"] / row[f"{APC} tok/s"]
        rows.append(row)
    verdict = _verdict([b["gap"] >= STEP * a["gap"] for a, b in zip(rows, rows[1:])])
    result = "; ".join(
        f"{r['prefix_len']}-token prefix: {RADIX}/{APC} gap {r['gap']:.2f}x mean TTFT (Poisson, "
        f"{APC} over {RADIX}), {r['gap throughput']:.2f}x throughput (burst, {RADIX} over {APC}); "
        "caching on/off beside: "
        + ", ".join(
            f"{d} {r[d]:.2f}x mean TTFT (Poisson), {r[f'{d} throughput']:.2f}x throughput (burst)"
            for d in DESIGNS
        )
        for r in rows
    )
    return Finding(
        setup=f"system_prompt: {groups} groups x {per_group} prompts, shared prefix of "
        f"{', '.join(map(str, lengths))} tokens, 128-token questions, 32 output tokens; Poisson 2 req/s "
        "(the verdict) and one burst (throughput, beside); "
        "simulated H100 Llama-3.1-8B; one run per arm at seed 0 (the simulated runs repeat exactly at a seed)",
        measured=f"the gap: {APC}'s mean TTFT over {RADIX}'s (Poisson) and {RADIX}'s total token throughput "
        f"over {APC}'s (burst), per prefix length, caching on; beside it, per design, mean TTFT without "
        "caching over with (Poisson) and throughput with over without (burst)",
        result=result,
        verdict=verdict,
        figure=Figure(
            f"{RADIX} vs {APC} gap by shared-prefix length",
            "ratio (x)",
            {
                f"{r['prefix_len']} tokens": {
                    "TTFT gap (Poisson)": r["gap"],
                    "throughput gap (burst)": r["gap throughput"],
                }
                for r in rows
            },
            reference=1.0,
        ),
        details=rows,
    )


def _verdict(steps_rising: list[bool]) -> str:
    if all(steps_rising):
        return HOLDS
    if not any(steps_rising):
        return FAILS
    return depends("the prefix length: the gap widens at some steps and not at others")


CLAIM = Claim(
    17,
    "prefix_weight",
    "The heavier the shared prefix, the bigger the gap between SGLang (RadixAttention) and vLLM (APC).",
    "the article",
    f"Holds when the gap ({APC}'s mean TTFT over {RADIX}'s, caching on, Poisson 2 req/s) rises by at least 5% "
    "at every step to a longer shared prefix (questions and outputs fixed); does not hold when it rises by "
    "less at every step; depends on the prefix length otherwise. The burst throughput gap and each design's "
    "caching on / off gain (the restated form: the gap between caching on and off) are reported beside.",
    measure,
)
