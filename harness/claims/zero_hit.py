"""Claim 1: prefix caching costs under 1% throughput at a 0% hit rate.

Both measurements use the unique workload (no token shared anywhere) and harness.run.overhead's
interleaved on/off measurement. End to end on this CPU: 1 - the on/off throughput ratio. Projected
per GPU preset (simulated executor): the process CPU time that caching adds to the engine loop,
over the preset's simulated run time. CPU time, not the wall clock: other jobs on a shared machine
stretch wall-clock bookkeeping several-fold, but not this process's own CPU seconds. The
bookkeeping wall-clock share (the report's projected_overhead.csv quantity) is given beside it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd

from harness.claims.arms import GPU_BUDGETS, GPU_PRESETS
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, UNSURE, Claim, Figure, Finding, sum_up, undecided
from harness.claims.zero_hit_worker import config, pairs
from harness.report.tables import VLLM_OVERHEAD_CLAIM
from harness.run import overhead

SEEDS = 10  # paired on/off seeds of the one numerator measurement per design
# --quick runs beside other work (CI's other test worker, the second invocation of
# tests/live/test_claims_reproduce.py), where single pairs ranged 0.2-1.3% around a 0.4% median:
# the interval's upper end x(9) of 10 then crossed 1% in one invocation of two. x(15) of 20 needs
# six such pairs, not two. The full run, on a box of its own, keeps 10.
QUICK_SEEDS = 20
PROCESSES = 5  # fresh processes the seeds are spread over (SEEDS / PROCESSES seeds each)
# Each arm of a seed is timed twice and its lower CPU time kept (zero_hit_worker.pairs). With one
# timing, a burst of the other test worker's load on one arm of a pair moved single pairs by
# +-0.4 points at --quick, and an interval's end across 1%: the label of two invocations differed
# in two CI runs in a row (2026-12-07; the fastest of two cut the widest pair from 0.71% to 0.48%).
TIMINGS = 2
# (prompt, output) tokens: the published claim's prefill-heavy shape and its decode-heavy mirror,
# where the run is longer per prompt token but every step still pays the cache's bookkeeping
SHAPES = {"prefill-heavy": (1024, 128), "decode-heavy": (128, 1024)}


def median_ci(values: list[float]) -> tuple[float, float, float]:
    """Median and its distribution-free ~95% interval: the order statistics x(k), x(n-k+1) with
    the largest k whose binomial(n, 1/2) tail P(B < k) stays at or below 2.5% (n = 10: x(2), x(9),
    97.9% coverage; n = 20: x(6), x(15), 95.9%). Robust to the loaded machine's occasional slow
    run, unlike a t-interval."""
    xs = sorted(values)
    n = len(xs)
    median = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    k, tail = 0, 0.0
    while k < n // 2:
        nxt = tail + math.comb(n, k) / 2**n
        if nxt > 0.025:
            break
        tail, k = nxt, k + 1
    if k == 0:
        return median, math.nan, math.nan
    return median, xs[k - 1], xs[n - k]


def measure(ctx: Context) -> Finding:
    cpu = _cpu_ratios(ctx)
    projected = _projected(ctx)
    lines = [
        f"{r.engine}/{r.hardware}/{r.shape}: {_pct(r.share)} [{_pct(r.low)}, {_pct(r.high)}] "
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
        {
            f"{h} {shape}": dict(zip(g["engine"], 100 * g["share"]))
            for (h, shape), g in projected.groupby(["hardware", "shape"])
        },
        reference=100 * VLLM_OVERHEAD_CLAIM,
        reference_label="claim: 1%",
    )
    return Finding(
        setup=f"unique workload ({_num_prompts(ctx)} prompts, burst), prefill-heavy (1,024 + 128 tokens) and "
        "decode-heavy (128 + 1,024), on the simulated "
        f"executor, {len(_presets(ctx))} GPU preset(s); added CPU measured once per design over {_seeds(ctx)} paired "
        f"seeds spread over {PROCESSES} fresh processes, each arm timed {TIMINGS} times and its lowest CPU time kept (for this implementation, on this loaded 2-core "
        "machine; the interval carries the spread between invocations) and divided by each preset's run "
        f"time; CPU: model {_cpu_model(ctx)}, unique "
        f"workload, {_repeats(ctx)} interleaved on/off pairs",
        measured="projected cost = median over seeds of (engine-loop CPU with caching / without - 1) x the "
        "lowest CPU without, over the simulated "
        "duration, with its order-statistic ~95% interval; CPU end to end: 1 - on/off throughput ratio on the process "
        "CPU clock",
        result=f"projected: {'; '.join(lines)}. CPU end to end: {cpu_text}",
        verdict=_verdict(projected),
        figure=figure,
        details=[*projected.to_dict("records"), *cpu.to_dict("records")],
        interval="; ".join(
            f"{r.engine}/{r.hardware}/{r.shape} [{_pct(r.low)}, {_pct(r.high)}] (n={r.n_pairs} pairs)"
            for r in projected.itertuples()
        ),
    )


CLAIM = Claim(
    1,
    "zero_hit",
    "Prefix caching costs under 1% throughput at a 0% hit rate.",
    "vLLM V1 alpha release blog, 2025-01-27",
    "For this implementation: the numerator (engine-loop CPU seconds caching adds: per seed, cache on / off "
    "on the same steps, minus 1, times the lowest cache-off CPU time) is measured once per design and shape (prefill-heavy 1,024 + 128 and decode-heavy "
    "128 + 1,024 tokens) over 10 paired seeds (20 in --quick) spread over 5 fresh processes (so the spread between "
    "invocations enters it), each arm timed twice and its lower CPU time kept, its median and distribution-free ~95% interval (order "
    "statistics), and divided by each GPU preset's simulated run time of that shape. Holds when, for both "
    "designs on every preset and shape, the interval's upper end is below 1%; does not hold when every "
    "preset and shape has a design whose lower end is above 1%; undecided when every one straddles 1%; "
    "depends on the preset and shape when one holds and another does not (each as far from the claim as its "
    "worse design); a mix of holds (or does not hold) and straddling cells is undecided, naming each. The CPU "
    "end-to-end cost is reported beside it.",
    measure,
)


def _presets(ctx: Context) -> tuple[str, ...]:
    return ctx.size(GPU_PRESETS[:1], GPU_PRESETS)


def _seeds(ctx: Context) -> int:
    return ctx.size(QUICK_SEEDS, SEEDS)


def _num_prompts(ctx: Context) -> int:
    return ctx.size(32, 256)


def _repeats(ctx: Context) -> int:
    return ctx.size(3, 5)


def _cpu_model(ctx: Context) -> str:
    return ctx.size("tiny", "s")


def _cpu_ratios(ctx: Context) -> pd.DataFrame:
    """harness.run.overhead's paired on/off measurement, without its profiling pass."""
    extra = [f"model={_cpu_model(ctx)}", f"workload.num_prompts={ctx.size(16, 32)}"]
    return overhead.ratios(_interleaved(ctx, "cpu", extra, range(_repeats(ctx))))


def _interleaved(ctx: Context, label: str, extra: list[str], seeds: range) -> pd.DataFrame:
    """The paired on/off runs of every seed, in this process."""
    rows = pairs(extra, list(seeds))
    _note(ctx, rows, label)
    return pd.DataFrame(rows)


def _note(ctx: Context, rows: list[dict], label: str) -> None:
    for r in rows:
        ctx.note(
            f"1-zero_hit/{label}-{r['engine']}-{'on' if r['cache_on'] else 'off'}-seed{r['seed']}",
            r["seed"],
        )


def _in_fresh_processes(ctx: Context, jobs: dict[str, list[str]]) -> dict[str, pd.DataFrame]:
    """Every job's (shape's) paired on/off runs of `_seeds` seeds, spread over PROCESSES new
    interpreters (harness/claims/zero_hit_worker.py), each serving every job for its seeds, so
    that the spread between invocations of this shared machine enters the interval."""
    groups = [list(range(_seeds(ctx)))[i::PROCESSES] for i in range(PROCESSES)]
    rows = [
        row
        for g in groups
        if g
        for row in _in_fresh_process([(label, extra, g, TIMINGS) for label, extra in jobs.items()])
    ]
    by_label = {label: [r for r in rows if r["label"] == label] for label in jobs}
    for label, labelled in by_label.items():
        _note(ctx, labelled, label)
    return {label: pd.DataFrame(labelled) for label, labelled in by_label.items()}


def _in_fresh_process(jobs: list[tuple[str, list[str], list[int], int]]) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "harness.claims.zero_hit_worker", json.dumps(jobs)],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    rows: list[dict] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


def _projected(ctx: Context) -> pd.DataFrame:
    """Per shape, preset and engine: the shape's added-CPU measurement over the preset's run time.
    The numerator is the same steps on every preset, so it is measured once, on the first."""
    presets = _presets(ctx)
    workloads = {shape: _workload(ctx, shape) for shape in SHAPES}
    first = {
        shape: ["executor=simulated", f"hardware={presets[0]}", *w]
        for shape, w in workloads.items()
    }
    runs = _in_fresh_processes(ctx, first)
    return pd.concat(
        [_projected_shape(shape, workloads[shape], runs[shape], presets) for shape in SHAPES],
        ignore_index=True,
    )


def _workload(ctx: Context, shape: str) -> list[str]:
    prompt_len, output_len = SHAPES[shape]
    return [
        f"workload.num_prompts={_num_prompts(ctx)}",
        f"workload.prompt_len={prompt_len}",
        f"workload.output_len={output_len}",
        "engine.kv_capacity_tokens=524288",
        *GPU_BUDGETS,
    ]


def _projected_shape(
    shape: str, workload: list[str], runs: pd.DataFrame, presets: tuple[str, ...]
) -> pd.DataFrame:
    added = {}
    for engine, g in runs.groupby("engine"):
        on, off = g[g["cache_on"]].set_index("seed"), g[~g["cache_on"]].set_index("seed")
        added[engine] = (
            median_ci(added_cpu(on["cpu_s"], off["cpu_s"]).tolist()),
            float(((on["bookkeeping_ms"] - off["bookkeeping_ms"]) / 1e3).median()),
            len(on),
        )
    rows = []
    for preset in presets:
        durations = _durations(["executor=simulated", f"hardware={preset}", *workload])
        for engine, ((med, low, high), bookkeeping_s, n) in added.items():
            d = durations[engine]
            rows.append(
                {
                    "hardware": preset,
                    "shape": shape,
                    "engine": engine,
                    "n_pairs": n,
                    "duration_s": d,
                    "added_cpu_s": med,
                    "share": med / d,
                    "low": low / d,
                    "high": high / d,
                    "bookkeeping_share": bookkeeping_s / d,
                }
            )
    return pd.DataFrame(rows)


def added_cpu(on: pd.Series, off: pd.Series) -> pd.Series:
    """Per seed, the CPU seconds caching adds to a run: (on / off - 1) x the lowest caching-off
    CPU time among the seeds. A load that lasts (another job on the shared box for minutes) slows
    both runs of a pair alike and scaled their difference with it: in one side-by-side test run
    the median moved from 0.23% to 0.60% between the two invocations. Their ratio does not move
    with it, and the lowest off time is the least disturbed run's, as timeit keeps its fastest."""
    return (on / off - 1) * float(off.min())


def _durations(extra: list[str]) -> dict[str, float]:
    """Simulated run time per design with caching on (a 0% hit run: the same as off)."""
    return {
        e: overhead.measure_arm(config(e, True, extra), 0)["duration_s"]
        for e, on in overhead.ARMS
        if on
    }


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
    for hardware, shape, st in zip(projected["hardware"], projected["shape"], state):
        key = f"{hardware} {shape}"
        per_preset[key] = max(per_preset.get(key, "below"), st, key=SEVERITY.index)
    if set(per_preset.values()) == {"straddles"}:
        return undecided("every interval straddles 1%; more seeds would decide")
    as_label = {"below": HOLDS, "straddles": UNSURE, "above": FAILS}
    return sum_up(
        "the preset and shape",
        {k: as_label[v] for k, v in per_preset.items()},
        unsure=LABELS["straddles"],
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None or pd.isna(x) else f"{100 * x:.3f}%"


def _cost(ratio_bound: float | None) -> str:
    return "n/a" if ratio_bound is None or pd.isna(ratio_bound) else f"{1 - ratio_bound:+.2%}"
