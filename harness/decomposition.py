"""Scheduler x cache decomposition: which axis drives the difference between two engines.

From the 2x2 arms (cache apc|radix x scheduler vllm|sglang, caching on, fcfs, upstream
granularities) of each workload, per metric:

    data-structure effect under scheduler S = metric(radix, S) - metric(apc, S)
    scheduler effect under cache C          = metric(C, sglang) - metric(C, vllm)
    shipped difference                      = metric(radix, sglang) - metric(apc, vllm)

The shipped difference is what `apc` vs `radix` measures; it equals one data-structure effect plus
one scheduler effect either way round the square. As in any 2x2 factorial, the main effects are
the means of the two simple effects and the interaction is half their difference
((DS under sglang - DS under vllm) / 2); the driver is the largest of the three in magnitude, and
"interaction" means the cache's effect depends on the scheduler (e.g. only one pairing reuses). `decomposition_table` gives one row per (workload, metric); the `decomposition` figure
shows the four arms' means per workload and metric with the effects written under each panel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engines.config import UPSTREAM_SCHEDULER
from harness.plots import Inputs, Skip, figure, footnote, main_config, plt, save

CELLS = (("apc", "vllm"), ("radix", "vllm"), ("apc", "sglang"), ("radix", "sglang"))
METRICS = (("hit_rate", "hit rate", 1.0), ("median_ttft_ms", "TTFT p50 (ms)", 1.0),
           ("p99_ttft_ms", "TTFT p99 (ms)", 1.0), ("total_token_throughput", "throughput (tok/s)", 1.0))  # fmt: skip
DEFAULT_GRANULARITY = {"apc": 16, "radix": 1}


def factorial_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Ok runs that belong to a 2x2 square: caching on, fcfs, each cache at its upstream granularity."""
    if runs.empty or "scheduler" not in runs:
        return runs.iloc[0:0]
    df = runs[runs["ok"] & runs["cache_enabled"] & (runs["policy"] == "fcfs")]
    default_g = df["engine"].map(DEFAULT_GRANULARITY)
    return df[df["engine"].isin(DEFAULT_GRANULARITY) & (df["granularity"] == default_g)]


def cell_means(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean of each metric per (workload, cache, scheduler) over seeds, with the run count."""
    cols = [m for m, _, _ in METRICS]
    df = runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce") for c in cols})
    out = df.groupby(["workload", "engine", "scheduler"])[cols].mean()
    return out.assign(n_runs=df.groupby(["workload", "engine", "scheduler"]).size())


def decomposition_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, metric) of the workloads that have all four cells."""
    square = factorial_runs(runs)
    if square.empty:
        return pd.DataFrame()
    square = main_config(square)
    means = cell_means(square)
    rows = []
    for workload in sorted(square["workload"].unique()):
        if any((workload, c, s) not in means.index for c, s in CELLS):
            continue
        for metric, _, _ in METRICS:
            v = {cell: float(means.loc[(workload, *cell), metric]) for cell in CELLS}
            rows.append(_row(workload, metric, v, int(means.loc[(workload, "apc", "vllm"), "n_runs"])))
    return pd.DataFrame(rows)


def _row(workload: str, metric: str, v: dict, n: int) -> dict:
    ds = {s: v[("radix", s)] - v[("apc", s)] for s in ("vllm", "sglang")}
    sched = {c: v[(c, "sglang")] - v[(c, "vllm")] for c in ("apc", "radix")}
    effects = {
        "data structure": (ds["vllm"] + ds["sglang"]) / 2,
        "scheduler": (sched["apc"] + sched["radix"]) / 2,
        "interaction": (ds["sglang"] - ds["vllm"]) / 2,
    }
    shipped = v[("radix", UPSTREAM_SCHEDULER["radix"])] - v[("apc", UPSTREAM_SCHEDULER["apc"])]
    biggest = max(abs(x) for x in effects.values())
    # Ties (within 1e-9 relative) go to the interaction: no single axis explains the difference.
    tied = [name for name, x in effects.items() if abs(x) >= biggest * (1 - 1e-9)]
    driver = "none" if biggest == 0 else ("interaction" if "interaction" in tied else tied[0])
    return {
        "workload": workload, "metric": metric, "n_runs_per_arm": n,
        **{f"{c}+{s}": v[(c, s)] for c, s in CELLS},
        "shipped_difference": shipped,
        "data_structure_effect_under_vllm": ds["vllm"], "data_structure_effect_under_sglang": ds["sglang"],
        "scheduler_effect_under_apc": sched["apc"], "scheduler_effect_under_radix": sched["radix"],
        "data_structure_main_effect": effects["data structure"], "scheduler_main_effect": effects["scheduler"],
        "interaction": effects["interaction"], "driver": driver,
    }  # fmt: skip


@figure("decomposition")
def decomposition(inp: Inputs) -> list[str]:
    table = decomposition_table(inp.runs)
    if table.empty:
        raise Skip("no workload with all four scheduler x cache arms (run +suite=factorial)")
    workloads = sorted(table["workload"].unique())
    fig, axes = plt.subplots(len(METRICS), 1, figsize=(max(7, 1.6 * len(workloads)), 3.2 * len(METRICS)))
    width = 0.8 / len(CELLS)
    for ax, (metric, label, _) in zip(np.atleast_1d(axes), METRICS):
        sub = table[table["metric"] == metric].set_index("workload").loc[workloads]
        for i, (c, s) in enumerate(CELLS):
            x = np.arange(len(workloads)) + (i - (len(CELLS) - 1) / 2) * width
            ax.bar(x, sub[f"{c}+{s}"], width, label=f"cache {c} + scheduler {s}")
        ax.set_xticks(np.arange(len(workloads)), [f"{w}\n{_effects(sub.loc[w])}" for w in workloads], fontsize=7)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=8, ncol=2)
    np.atleast_1d(axes)[0].set_title("Scheduler x cache: data-structure (DS) and scheduler (SCH) effects per workload")
    footnote(fig, factorial_runs(inp.runs), "DS = radix - apc under vllm/sglang; SCH = sglang - vllm under apc/radix; last line: driver")
    fig.tight_layout()
    return [save(fig, inp.out_dir, "decomposition")]


def _effects(row: pd.Series) -> str:
    return (f"DS {row['data_structure_effect_under_vllm']:+.3g}/{row['data_structure_effect_under_sglang']:+.3g}"
            f" SCH {row['scheduler_effect_under_apc']:+.3g}/{row['scheduler_effect_under_radix']:+.3g}"
            f"\n{row['driver']}")  # fmt: skip
