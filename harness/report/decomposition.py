"""Scheduler x cache decomposition: which axis drives the difference between two engines.

The square's two caches are the default design A (engines/cache/__init__.py `DEFAULT_DESIGN`) and
the first registered design B whose upstream ships another scheduler; its schedulers are their
upstream ones, SA and SB (today apc, radix and vllm, sglang). From the 2x2 arms (cache A|B x
scheduler SA|SB, caching on, fcfs, upstream granularities) of each workload, per metric:

    data-structure effect under scheduler S = metric(B, S) - metric(A, S)
    scheduler effect under cache C          = metric(C, SB) - metric(C, SA)
    shipped difference                      = metric(B, SB) - metric(A, SA)

With runs of SGLang's overlap loop (`engine.overlap=true`, scheduler level `sglang-overlap`) in the
same sweeps, the row also gives the overlap effect under each cache, metric(C, SB-overlap) -
metric(C, SB); those runs are no cell of the square (NaN where they are missing).

The shipped difference is what A vs B measures; it equals one data-structure effect plus
one scheduler effect either way round the square. As in any 2x2 factorial, the main effects are
the means of the two simple effects and the interaction is half their difference
((DS under SB - DS under SA) / 2); the driver is the largest of the three in magnitude, and
"interaction" means the cache's effect depends on the scheduler (e.g. only one pairing reuses).
`decomposition_table` gives one row per platform (model, executor, hardware), workload and metric,
each from the runs of the sweeps that hold the whole square for that workload (a suite run such as
`factorial`), so the four cells are measured side by side, never a cell of one suite against the
cells of another run at another time; the `decomposition` figure shows the four arms' means per
workload and metric (each arm in its colour of every other figure) and the effects beside them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engines.cache import DEFAULT_DESIGN, designs
from engines.config import UPSTREAM_SCHEDULER
from harness.report.figstyle import PLATFORM, on_clock, plain_ms_axis, platform_title, platforms
from harness.report.plots import (
    INTERVAL_NOTE,
    Inputs,
    Skip,
    _grouped_bars,
    footnote,
    main_config,
    plt,
    save,
)
from harness.report.tables import DEFAULT_GRANULARITY, OVERLAP

TIE_TOLERANCE = 0.05  # relative
# the square: caches (A, B) and their upstream schedulers (SA, SB), from the design registry
CACHE_A = DEFAULT_DESIGN
CACHE_B = next(d.name for d in designs() if d.upstream_scheduler != UPSTREAM_SCHEDULER[CACHE_A])
SCHED_A, SCHED_B = UPSTREAM_SCHEDULER[CACHE_A], UPSTREAM_SCHEDULER[CACHE_B]
CELLS = ((CACHE_A, SCHED_A), (CACHE_B, SCHED_A), (CACHE_A, SCHED_B), (CACHE_B, SCHED_B))
SCHED_B_OVERLAP = SCHED_B + OVERLAP  # the third level of the scheduler axis (SGLang's overlap loop)
METRICS = (
    ("hit_rate", "hit rate"),
    ("median_ttft_ms", "TTFT p50 (ms)"),
    ("p99_ttft_ms", "TTFT p99 (ms)"),
    ("total_token_throughput", "throughput (tok/s, in+out)"),
)


def factorial_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Ok runs that belong to a 2x2 square: caching on, fcfs, each cache at its upstream granularity."""
    if runs.empty or "scheduler" not in runs:
        return runs.iloc[0:0]
    df = runs[runs["ok"] & runs["cache_enabled"] & (runs["policy"] == "fcfs")]
    default_g = df["engine"].map(DEFAULT_GRANULARITY)
    return df[df["engine"].isin(DEFAULT_GRANULARITY) & (df["granularity"] == default_g)]


def cell_means(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean of each metric per (workload, cache, scheduler) over seeds, with the run count."""
    cols = [m for m, _ in METRICS]
    df = runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce") for c in cols})
    out = df.groupby(["workload", "engine", "scheduler"])[cols].mean()
    return out.assign(n_runs=df.groupby(["workload", "engine", "scheduler"]).size())


def cell_arm(cache: str, scheduler: str) -> str:
    """The arm name a cell's runs carry everywhere else in the report (tables._arm): the design
    for a shipped pairing, `<design>-<scheduler>` for a cross arm."""
    return cache if UPSTREAM_SCHEDULER.get(cache) == scheduler else f"{cache}-{scheduler}"


def square_sweeps(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of one workload from the sweeps that hold all four cells; all of them where no
    sweep does (four arms run one by one into one folder count as one sweep anyway)."""
    if "sweep" not in runs:
        return runs
    cells = set(CELLS)
    whole = [
        sweep
        for sweep, group in runs.groupby("sweep", sort=True)
        if cells <= set(zip(group["engine"], group["scheduler"]))
    ]
    return runs[runs["sweep"].isin(whole)] if whole else runs


def decomposition_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per platform, workload and metric of the workloads that have all four cells."""
    square = factorial_runs(runs)
    if square.empty:
        return pd.DataFrame()
    keys = [k for k in PLATFORM if k in square]
    tables = []
    for platform, group in square.groupby(keys, dropna=False, sort=True):
        platform = platform if isinstance(platform, tuple) else (platform,)
        table = _platform_table(group)
        if not table.empty:
            for key, value in reversed(list(zip(keys, platform))):
                table.insert(1, key, None if pd.isna(value) else value)
            tables.append(table)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def square_runs(square: pd.DataFrame) -> pd.DataFrame:
    """The runs of one platform's square the table and figure use: per workload its main
    configuration (plots.main_config) from the sweeps that hold all four cells."""
    square = main_config(square)
    parts = [square_sweeps(g) for _, g in square.groupby("workload", sort=True)]
    return pd.concat(parts) if parts else square


def _platform_table(square: pd.DataFrame) -> pd.DataFrame:
    square = square_runs(square)
    means = cell_means(square)
    rows = []
    for workload in sorted(square["workload"].unique()):
        if any((workload, c, s) not in means.index for c, s in CELLS):
            continue
        for metric, _ in METRICS:
            v = {cell: float(means.loc[(workload, *cell), metric]) for cell in CELLS}
            row = _row(workload, metric, v, int(means.loc[(workload, *CELLS[0]), "n_runs"]))
            for cache in (CACHE_A, CACHE_B):
                key = (workload, cache, SCHED_B_OVERLAP)
                ov = float(means.loc[key, metric]) if key in means.index else float("nan")
                row[f"overlap_effect_under_{cache}"] = ov - v[(cache, SCHED_B)]
            rows.append(row)
    return pd.DataFrame(rows)


def _row(workload: str, metric: str, v: dict, n: int) -> dict:
    a, b, sa, sb = CACHE_A, CACHE_B, SCHED_A, SCHED_B
    ds = {s: v[(b, s)] - v[(a, s)] for s in (sa, sb)}
    sched = {c: v[(c, sb)] - v[(c, sa)] for c in (a, b)}
    effects = {
        "data structure": (ds[sa] + ds[sb]) / 2,
        "scheduler": (sched[a] + sched[b]) / 2,
        "interaction": (ds[sb] - ds[sa]) / 2,
    }
    shipped = v[(b, sb)] - v[(a, sa)]
    biggest = max(abs(x) for x in effects.values())
    # When one pairing alone differs, all three effects have the same size: effects within
    # TIE_TOLERANCE of the largest tie, and a tie that includes the interaction is named so.
    tied = [name for name, x in effects.items() if abs(x) >= biggest * (1 - TIE_TOLERANCE)]
    driver = "none" if biggest == 0 else ("interaction" if "interaction" in tied else tied[0])
    return {
        "workload": workload,
        "metric": metric,
        "n_runs_per_arm": n,
        **{f"{c}+{s}": v[(c, s)] for c, s in CELLS},
        "shipped_difference": shipped,
        f"data_structure_effect_under_{sa}": ds[sa],
        f"data_structure_effect_under_{sb}": ds[sb],
        f"scheduler_effect_under_{a}": sched[a],
        f"scheduler_effect_under_{b}": sched[b],
        "data_structure_main_effect": effects["data structure"],
        "scheduler_main_effect": effects["scheduler"],
        "interaction": effects["interaction"],
        "driver": driver,
    }


EFFECTS = (
    ("data_structure_main_effect", f"data structure ({CACHE_B} - {CACHE_A})"),
    ("scheduler_main_effect", f"scheduler ({SCHED_B} - {SCHED_A})"),
    ("interaction", "interaction"),
)
# Effects are no arm: greys, so no effect wears an engine's colour.
EFFECT_COLOURS = ("0.2", "0.5", "0.78")


def decomposition(inp: Inputs) -> list[str]:
    """Per metric: the four arms per workload (left) and the three effects (right)."""
    written = []
    for suffix, runs in platforms(inp.runs):
        table = decomposition_table(runs)
        if not table.empty:
            written.append(_decomposition(inp, runs, table, suffix))
    if not written:
        raise Skip("no workload with all four scheduler x cache arms (run +suite=factorial)")
    return written


def _decomposition(inp: Inputs, runs: pd.DataFrame, table: pd.DataFrame, suffix: str) -> str:
    workloads = sorted(table["workload"].unique())
    cells = square_runs(factorial_runs(runs))  # the runs the table averaged, nothing else
    cells = cells[cells["workload"].isin(workloads)]
    arms = [cell_arm(c, s) for c, s in zip(cells["engine"], cells["scheduler"])]
    cells = cells.assign(arm=arms, series=arms)
    width = max(6.0, 0.9 * len(workloads))
    fig, axes = plt.subplots(
        len(METRICS), 2, figsize=(2 * width, 2.8 * len(METRICS)), squeeze=False
    )
    for (left, right), (metric, label) in zip(axes, METRICS):
        # The arms as every other figure draws them: bars on linear axes, points on the log
        # TTFT axes (workloads span milliseconds to minutes), intervals from three runs on.
        log = "ttft" in metric
        _grouped_bars(left, cells, metric, log=log)
        if log:
            left.set_yscale("log")
            plain_ms_axis(left)
        label = on_clock(label, runs) if "ms" in label or "/s" in label else label
        left.set_ylabel(label)
        sub = table[table["metric"] == metric].set_index("workload").loc[workloads]
        effects = [
            (name, sub[column], shade) for (column, name), shade in zip(EFFECTS, EFFECT_COLOURS)
        ]
        _bars(right, workloads, effects)
        right.axhline(0, color="0.3", lw=0.8)
        right.set_ylabel(f"effect on {label}")
    axes[0][0].set_title("the 2x2 arms (mean over seeds)", pad=34)
    axes[0][1].set_title("main effects and interaction (2x2 factorial, arithmetic means)", pad=34)
    for ax in axes[0]:  # above the first row, clear of the bars
        ax.legend(fontsize=7, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle(f"Scheduler x cache: the 2x2 arms and their effects ({platform_title(runs)})")
    fig.tight_layout()
    footnote(
        fig,
        cells,
        "per workload and metric: decomposition.csv (simple effects, driver) | each cell from "
        f"the sweeps that ran all four arms of its workload | {INTERVAL_NOTE}",
    )
    return save(fig, inp, "decomposition", suffix)


def _bars(ax, workloads: list[str], series: list[tuple[str, pd.Series, str]]) -> None:
    """The effects: one bar per workload and effect, on a linear axis (differences)."""
    width = 0.8 / len(series)
    for i, (name, values, shade) in enumerate(series):
        x = np.arange(len(workloads)) + (i - (len(series) - 1) / 2) * width
        ax.bar(x, values.to_numpy(dtype=float), width, label=name, color=shade)
    ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
