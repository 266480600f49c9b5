"""Claim 1: prefix caching costs under 1% throughput at a 0% hit rate.

Two measurements, both of the unique workload (no token shared anywhere): the end-to-end on/off
throughput ratio of this CPU engine (harness.overhead's interleaved measurement), and the
projection per GPU preset, where the cache bookkeeping is timed for real and divided by the
preset's simulated run time (the report's projected_overhead_table).
"""

from __future__ import annotations

import pandas as pd

from harness import overhead
from harness.claims.arms import ARMS, GPU_BUDGETS, GPU_PRESETS
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Figure, Finding, undecided
from harness.claims.registry import claim
from harness.results import load_runs
from harness.tables import VLLM_OVERHEAD_CLAIM, projected_overhead_table, tidy_runs

FOLDER = "1-zero_hit"


@claim(
    1,
    "zero_hit",
    "Prefix caching costs under 1% throughput at a 0% hit rate.",
    "vLLM V1 alpha release blog, 2025-01-27",
    "Holds when, for both designs on every GPU preset, the 95% interval of the projected added "
    "cost (bookkeeping on - off, over the simulated run time) lies below 1%; does not hold when "
    "one lies above 1%; undecided otherwise. The CPU end-to-end ratio is reported beside it.",
)
def measure(ctx: Context) -> Finding:
    cpu = _cpu_ratios(ctx)
    projected = _projected(ctx)
    verdict = _verdict(projected)
    lines = [
        f"{r.engine}/{r.hardware}: {_pct(r.overhead_share)} [{_pct(r.ci_low)}, {_pct(r.ci_high)}]"
        for r in projected.itertuples()
    ]
    cpu_text = "; ".join(
        f"{r.engine} {1 - r.ratio:+.2%} [{_cost(r.ci_high)}, {_cost(r.ci_low)}] (n={r.n_pairs})"
        for r in cpu[cpu["clock"] == "cpu_s"].itertuples()
    )
    figure = Figure(
        "Projected 0%-hit cost of prefix caching",
        "added cost (% of run time)",
        {
            h: {e: 100 * s for e, s in zip(g["engine"], g["overhead_share"])}
            for h, g in projected.groupby("hardware")
        },
        reference=100 * VLLM_OVERHEAD_CLAIM,
        reference_label="claim: 1%",
    )
    return Finding(
        setup=f"unique workload ({ctx.size(64, 256)} prompts of 1,024 + 128 tokens, burst) on the simulated "
        f"executor per GPU preset, {len(_seeds(ctx))} seeds; CPU: model {_cpu_model(ctx)}, unique workload, "
        f"{_repeats(ctx)} interleaved on/off pairs",
        measured="projected cost = (bookkeeping with caching - without) / simulated duration, mean and 95% "
        "t-interval over seeds; CPU: 1 - on/off throughput ratio on the process CPU clock",
        result=f"projected: {'; '.join(lines)}. CPU end to end: {cpu_text}",
        verdict=verdict,
        figure=figure,
        details=[*projected.to_dict("records"), *cpu.to_dict("records")],
    )


def _seeds(ctx: Context) -> range:
    return range(ctx.size(3, 5))


def _repeats(ctx: Context) -> int:
    return ctx.size(3, 5)


def _cpu_model(ctx: Context) -> str:
    return ctx.size("tiny", "s")


def _cpu_ratios(ctx: Context) -> pd.DataFrame:
    """harness.overhead's paired on/off measurement, without its profiling pass."""
    extra = [f"model={_cpu_model(ctx)}", f"workload.num_prompts={ctx.size(16, 32)}"]
    configs = {(e, on): overhead.config(e, on, extra) for e, on in overhead.ARMS}
    rows = [
        {"engine": e, "cache_on": on, "seed": seed, **overhead.measure(cfg, seed)}
        for seed in range(_repeats(ctx))
        for (e, on), cfg in configs.items()
    ]
    return overhead.ratios(pd.DataFrame(rows))


def _projected(ctx: Context) -> pd.DataFrame:
    presets = ctx.size(GPU_PRESETS[:1], GPU_PRESETS)
    workload = (
        "workload=unique",
        f"workload.num_prompts={ctx.size(64, 256)}",
        "workload.prompt_len=1024",
        "workload.output_len=128",
        "engine.kv_capacity_tokens=524288",
        *GPU_BUDGETS,
    )
    for preset in presets:
        for seed in _seeds(ctx):
            for arm in ("apc", "apc-off", "radix", "radix-off"):
                overrides = (
                    "executor=simulated",
                    f"hardware={preset}",
                    f"seed={seed}",
                    *workload,
                    *ARMS[arm],
                )
                ctx.run(FOLDER, f"{preset}-{arm}-seed{seed}", overrides)
    runs, _ = load_runs(ctx.out_dir / "runs" / FOLDER)
    return projected_overhead_table(tidy_runs(runs))


def _verdict(projected: pd.DataFrame) -> str:
    high = projected["ci_high"].fillna(projected["overhead_share"])
    low = projected["ci_low"].fillna(projected["overhead_share"])
    if (high < VLLM_OVERHEAD_CLAIM).all():
        return HOLDS
    if (low > VLLM_OVERHEAD_CLAIM).any():
        return FAILS
    return undecided("an interval straddles 1%; more seeds would decide")


def _pct(x: float | None) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:.3f}%"


def _cost(ratio_bound: float | None) -> str:
    return "n/a" if ratio_bound is None or pd.isna(ratio_bound) else f"{1 - ratio_bound:+.2%}"
