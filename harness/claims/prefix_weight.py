"""Claim 17: the heavier the shared prefix, the bigger the gain from prefix caching.

The same system-prompt traffic with a shared prefix of growing length (the question and output
fixed), caching on against off per design, on the simulated H100 8B preset: the mean-TTFT gain
under low-rate Poisson arrivals (TTFT is then prefill, not queueing: the verdict) and the
throughput gain in one burst (beside it).
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
        rows.append(row)
    rising = {d: all(b[d] >= STEP * a[d] for a, b in zip(rows, rows[1:])) for d in DESIGNS}
    flat = {d: all(b[d] < STEP * a[d] for a, b in zip(rows, rows[1:])) for d in DESIGNS}
    if all(rising.values()):
        verdict = HOLDS
    elif all(flat.values()):
        verdict = FAILS
    else:
        verdict = depends("the design")
    result = "; ".join(
        f"{r['prefix_len']}-token prefix: "
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
        "simulated H100 Llama-3.1-8B; deterministic runs (one seed)",
        measured="mean TTFT without caching over with (Poisson), and total token throughput with over "
        "without (burst), per design and prefix length",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Caching gain by shared-prefix length",
            "mean TTFT without / with caching (x)",
            {f"{r['prefix_len']} tokens": {d: r[d] for d in DESIGNS} for r in rows},
        ),
        details=rows,
    )


CLAIM = Claim(
    17,
    "prefix_weight",
    "The heavier the shared prefix, the bigger the gap between caching on and off.",
    "the article (prefix caching pays in proportion to what it skips)",
    "Holds when, for both designs, the mean-TTFT gain (caching off / on, Poisson 2 req/s) rises by at "
    "least 5% at every step to a longer shared prefix (questions and outputs fixed); does not hold when "
    "it rises by less at every step for both; depends on the design otherwise. Burst throughput gains "
    "reported beside.",
    measure,
)
