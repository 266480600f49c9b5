"""Claim 1: prefix caching costs under 1% throughput at a 0% hit rate.

Both measurements use the unique workload (no token shared anywhere) and harness.overhead's
interleaved on/off measurement. End to end on this CPU: 1 - the on/off throughput ratio. Projected
per GPU preset (simulated executor): the process CPU time that caching adds to the engine loop,
over the preset's simulated run time. CPU time, not the wall clock: other jobs on a shared machine
stretch wall-clock bookkeeping several-fold, but not this process's own CPU seconds. The
bookkeeping wall-clock share (the report's projected_overhead.csv quantity) is given beside it.
"""

from __future__ import annotations

import pandas as pd

from harness import overhead
from harness.claims.arms import GPU_BUDGETS, GPU_PRESETS
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Figure, Finding, depends, undecided
from harness.claims.registry import claim
from harness.report.stats import mean_ci
from harness.report.tables import VLLM_OVERHEAD_CLAIM

SEEDS = 3  # per preset, as suite overhead_sim


@claim(
    1,
    "zero_hit",
    "Prefix caching costs under 1% throughput at a 0% hit rate.",
    "vLLM V1 alpha release blog, 2025-01-27",
    "Holds when, for both designs on every GPU preset, the 95% interval of the projected added "
    "cost (CPU seconds caching adds to the engine loop, over the simulated run time) lies below "
    "1%; does not hold when every preset has a design above 1%; undecided when every preset "
    "straddles 1%; otherwise depends on the preset (each as far from the claim as its worse "
    "design). The CPU end-to-end cost is reported beside it.",
)
def measure(ctx: Context) -> Finding:
    cpu = _cpu_ratios(ctx)
    projected = _projected(ctx)
    lines = [
        f"{r.engine}/{r.hardware}: {_pct(r.share)} [{_pct(r.low)}, {_pct(r.high)}] "
        f"(wall-clock bookkeeping {_pct(r.bookkeeping_share)})"
        for r in projected.itertuples()
    ]
    cpu_text = "; ".join(
        f"{r.engine} {1 - r.ratio:+.2%} [{_cost(r.ci_high)}, {_cost(r.ci_low)}] (n={r.n_pairs})"
        for r in cpu[cpu["clock"] == "cpu_s"].itertuples()
    )
    figure = Figure(
        "Projected 0%-hit cost of prefix caching",
        "added CPU time (% of run time)",
        {h: dict(zip(g["engine"], 100 * g["share"])) for h, g in projected.groupby("hardware")},
        reference=100 * VLLM_OVERHEAD_CLAIM,
        reference_label="claim: 1%",
    )
    return Finding(
        setup=f"unique workload ({_num_prompts(ctx)} prompts of 1,024 + 128 tokens, burst) on the simulated "
        f"executor, {len(_presets(ctx))} GPU preset(s), {SEEDS} seeds; CPU: model {_cpu_model(ctx)}, unique "
        f"workload, {_repeats(ctx)} interleaved on/off pairs",
        measured="projected cost = (engine-loop CPU seconds with caching - without) / simulated duration, "
        "mean and 95% t-interval over seeds; CPU end to end: 1 - on/off throughput ratio on the process "
        "CPU clock",
        result=f"projected: {'; '.join(lines)}. CPU end to end: {cpu_text}",
        verdict=_verdict(projected),
        figure=figure,
        details=[*projected.to_dict("records"), *cpu.to_dict("records")],
    )


def _presets(ctx: Context) -> tuple[str, ...]:
    return ctx.size(GPU_PRESETS[:1], GPU_PRESETS)


def _num_prompts(ctx: Context) -> int:
    return ctx.size(64, 256)


def _repeats(ctx: Context) -> int:
    return ctx.size(3, 5)


def _cpu_model(ctx: Context) -> str:
    return ctx.size("tiny", "s")


def _cpu_ratios(ctx: Context) -> pd.DataFrame:
    """harness.overhead's paired on/off measurement, without its profiling pass."""
    extra = [f"model={_cpu_model(ctx)}", f"workload.num_prompts={ctx.size(16, 32)}"]
    return overhead.ratios(_interleaved(extra, range(_repeats(ctx))))


def _interleaved(extra: list[str], seeds: range) -> pd.DataFrame:
    configs = {(e, on): overhead.config(e, on, extra) for e, on in overhead.ARMS}
    rows = [
        {"engine": e, "cache_on": on, "seed": seed, **overhead.measure_arm(cfg, seed)}
        for seed in seeds
        for (e, on), cfg in configs.items()
    ]
    return pd.DataFrame(rows)


def _projected(ctx: Context) -> pd.DataFrame:
    """Per preset and engine: added CPU share and wall-clock bookkeeping share of the run time."""
    workload = [
        f"workload.num_prompts={_num_prompts(ctx)}",
        "workload.prompt_len=1024",
        "workload.output_len=128",
        "engine.kv_capacity_tokens=524288",
        *GPU_BUDGETS,
    ]
    rows = []
    for preset in _presets(ctx):
        runs = _interleaved(["executor=simulated", f"hardware={preset}", *workload], range(SEEDS))
        for engine, g in runs.groupby("engine"):
            on = g[g["cache_on"]].set_index("seed")
            off = g[~g["cache_on"]].set_index("seed")
            ci = mean_ci(((on["cpu_s"] - off["cpu_s"]) / on["duration_s"]).tolist())
            bookkeeping = (on["bookkeeping_ms"] - off["bookkeeping_ms"]) / (1e3 * on["duration_s"])
            rows.append(
                {
                    "hardware": preset,
                    "engine": engine,
                    "n_pairs": ci.n,
                    "duration_s": on["duration_s"].mean(),
                    "share": ci.mean,
                    "low": ci.low,
                    "high": ci.high,
                    "bookkeeping_share": bookkeeping.mean(),
                }
            )
    return pd.DataFrame(rows)


SEVERITY = ("below", "straddles", "above")  # where a preset's 95% interval lies against 1%
LABELS = {
    "below": "holds",
    "straddles": "undecided (interval straddles 1%)",
    "above": "does not hold",
}


def _verdict(projected: pd.DataFrame) -> str:
    """Each preset is as far from the claim as its worse design; the verdict sums up the presets."""
    high = projected["high"].fillna(projected["share"])
    low = projected["low"].fillna(projected["share"])
    state = [
        "above"
        if lo > VLLM_OVERHEAD_CLAIM
        else "below"
        if hi < VLLM_OVERHEAD_CLAIM
        else "straddles"
        for lo, hi in zip(low, high)
    ]
    per_preset: dict[str, str] = {}
    for hardware, st in zip(projected["hardware"], state):
        per_preset[hardware] = max(per_preset.get(hardware, "below"), st, key=SEVERITY.index)
    found = set(per_preset.values())
    if found == {"below"}:
        return HOLDS
    if found == {"above"}:
        return FAILS
    if found == {"straddles"}:
        return undecided("every interval straddles 1%; more seeds would decide")
    parts = [
        f"{LABELS[s]} on {', '.join(h for h, v in per_preset.items() if v == s)}"
        for s in SEVERITY
        if s in found
    ]
    return depends("the preset: " + "; ".join(parts))


def _pct(x: float | None) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:.3f}%"


def _cost(ratio_bound: float | None) -> str:
    return "n/a" if ratio_bound is None or pd.isna(ratio_bound) else f"{1 - ratio_bound:+.2%}"
