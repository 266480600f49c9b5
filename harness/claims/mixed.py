"""Claim 4: on general mixed traffic the two engines are close (SGLang ~4% ahead of vLLM).

apc against radix on ShareGPT conversations mixed with shared-system-prompt requests, 50 requests
in flight from the client, on the simulated H100 Llama-3.3-70B FP8 preset. Only the cache and its
scheduler differ between the arms; kernels, model and hardware are one cost model.
"""

from __future__ import annotations

from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_70B_FP8, RADIX
from harness.claims.experiment import Context, has_option
from harness.claims.record import Claim, Figure, Finding, not_measurable
from harness.report.stats import mean_ci

FOLDER = "4-mixed"
CLAIMED_RATIO = 1920 / 1850
CONCURRENCY = 50


def measure(ctx: Context) -> Finding:
    setup = (
        "mixed workload (ShareGPT sample conversations + 16 groups x 16 requests sharing 1,024-2,048-token "
        f"system prompts), client concurrency {CONCURRENCY}, simulated H100 Llama-3.3-70B FP8 (TP 2); only the "
        "cache and scheduler differ between arms, not kernels; beside it a no-sharing sample "
        "(workload=unique) as general traffic without reuse"
    )
    measured = "output token throughput (tok/s) of radix and apc; ratio radix / apc"
    if not has_option("load", "max_concurrency"):
        why = "needs a client-side concurrency limit, load.max_concurrency (issue [5/6])"
        return Finding(setup, measured, "not run", not_measurable(why))
    traffic = {"mixed": "workload=mixed", "no sharing": "workload=unique"}
    found = {name: _ratios(ctx, w) for name, w in traffic.items()}
    verdict = not_measurable(
        "the claim is about whole engines (kernels, CPU overheads) that the cost model does not see; "
        "the simulated gap comes from the schedulers' step shapes priced by a roofline model"
    )
    parts = []
    for name, (ratios, tput) in found.items():
        ci = mean_ci(ratios)
        interval = f" [{ci.low:.3f}, {ci.high:.3f}]" if ci.low is not None else f" (n={ci.n})"
        parts.append(
            f"{name}: {APC} {sum(tput[APC]) / ci.n:,.0f} tok/s, "
            f"{RADIX} {sum(tput[RADIX]) / ci.n:,.0f} tok/s; {RADIX}/{APC} {ci.mean:.3f}{interval}"
        )
    result = "; ".join(parts) + f" (claim: {CLAIMED_RATIO:.3f}; projections, not measurements)"
    figure = Figure(
        "Traffic at 50 concurrent requests (simulated H100 70B FP8)",
        "output throughput (tok/s)",
        {n: {a: sum(v) / len(v) for a, v in t.items()} for n, (_, t) in found.items()},
    )
    ratios = [r for rs, _ in found.values() for r in rs]
    return Finding(
        setup,
        measured,
        result,
        verdict,
        figure,
        [
            {"traffic": n, "seed": i, "ratio": r}
            for n, (rs, _) in found.items()
            for i, r in enumerate(rs)
        ],
    )


CLAIM = Claim(
    4,
    "mixed",
    "On general mixed traffic the two engines are close: SGLang ~1,920 tok/s against vLLM ~1,850 (~4%) on "
    "an H100 SXM5, Llama-3.3-70B FP8, 50 concurrent requests.",
    "third-party benchmark, January 2026",
    "Not measurable here, decided before measuring: the claim compares whole engines (kernels, CUDA graphs, "
    "CPU overheads, the two projects' server loops) that the roofline cost model does not represent, so the "
    "simulated gap is the two schedulers' step shapes priced by that model, nothing a GPU has checked. The "
    "ratio (radix / apc output throughput at a client concurrency of 50, mean over seeds) is reported "
    "beside the verdict, on the mixed preset and on a no-sharing sample (unique prompts) as general "
    "traffic without reuse.",
    measure,
)


def _ratios(ctx: Context, workload: str) -> tuple[list[float], dict[str, list[float]]]:
    ratios: list[float] = []
    tput: dict[str, list[float]] = {APC: [], RADIX: []}
    for seed in range(ctx.size(1, 3)):
        for a in tput:
            overrides = (
                *H100_70B_FP8,
                workload,
                f"load.max_concurrency={CONCURRENCY}",
                f"seed={seed}",
                *ARMS[a],
            )
            name = f"{workload.split('=')[1]}-{a}-seed{seed}"
            summary = ctx.run(FOLDER, name, overrides).summary
            tput[a].append(keys.value(summary, keys.OUTPUT_THROUGHPUT))
        ratios.append(tput[RADIX][-1] / tput[APC][-1])
    return ratios, tput
