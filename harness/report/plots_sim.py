"""The report's figures of simulated-executor runs: whole-trace TTFT against KV capacity per hardware
preset, and the projected 0%-hit overhead per preset (measured bookkeeping / virtual duration).

Listed in the report's registry of figures, harness/report/registry.py. Runs of the
simulated executor carry their cost model's name as `hardware` (the manifest's resolved config).
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from harness.report.figstyle import PlainLogLocator, colour
from harness.report.plots import (
    CAPACITY,
    INTERVAL_NOTE,
    Inputs,
    Skip,
    arm_label,
    capacity_axes,
    drawn_runs,
    footnote,
    legend_outside,
    line_points,
    save,
    swept_panels,
)
from harness.report.stats import MIN_INTERVAL_N
from harness.report.tables import VLLM_OVERHEAD_CLAIM, projected_overhead_table


def simulated(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs of the simulated executor that name their hardware preset."""
    if "hardware" not in runs:
        return runs.iloc[0:0]
    return runs[(runs["executor"] == "simulated") & runs["hardware"].notna()]


def _slowdown(runs: pd.DataFrame) -> str:
    values = sorted(
        {float(v) for v in runs.get("config.load.slowdown", pd.Series(dtype=float)).dropna()}
    )
    return ", ".join(f"{v:g}x" for v in values) if values else "1x"


def capacity_points(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean TTFT p50/p99 (ms) and hit rate per (workload, hardware, arm, capacity), cache-on runs
    of the simulated presets whose (workload, hardware) was run at two or more capacities."""
    runs = simulated(runs)
    runs = runs[runs["cache_enabled"]]
    keys = ["workload", "hardware", "arm", "kv_capacity_tokens"]
    points = (
        runs.groupby(keys, sort=True)[["median_ttft_ms", "p99_ttft_ms", "hit_rate"]]
        .mean()
        .reset_index()
    )
    num_caps = points.groupby(["workload", "hardware"])["kv_capacity_tokens"].transform("nunique")
    return points[num_caps >= 2]


# One figure per workload and preset; the model, like every other key, sets panels apart.
TRACE_FIGURE_KEYS = ("config.workload.name", "config.executor", "config.hardware.name")


def trace_capacity(inp: Inputs) -> list[str]:
    """Per (workload, preset): TTFT p50/p99 and hit rate against capacity, one row of panels per
    group of runs that differ in nothing but the capacity, the seed and the arm."""
    written = []
    runs = simulated(inp.runs)
    runs = runs[runs["cache_enabled"]]
    for (workload, hardware), group in runs.groupby(["workload", "hardware"], sort=True):
        rows = swept_panels(group, CAPACITY, TRACE_FIGURE_KEYS)
        if not rows:
            continue
        fig, axes = plt.subplots(
            len(rows),
            2,
            figsize=(11, 4 * len(rows)),
            gridspec_kw={"width_ratios": [3, 2]},
            squeeze=False,
        )
        for (ax_ttft, ax_hit), panel in zip(axes, rows):
            _trace_panel(ax_ttft, ax_hit, panel)
        fig.suptitle(f"Whole-trace replay: {workload} on {hardware}")
        fig.tight_layout()
        footnote(
            fig,
            drawn_runs(rows),
            f"hardware {hardware} | arrivals = trace timestamps x {_slowdown(group)} | {INTERVAL_NOTE}",
        )
        written.append(save(fig, inp, "trace_capacity", workload, hardware))
    if not written:
        raise Skip("no simulated run with a hardware preset at two or more KV capacities")
    return written


def _requests(runs: pd.DataFrame) -> str:
    counts = sorted({int(c) for c in pd.to_numeric(runs["completed"], errors="coerce").dropna()})
    return " or ".join(f"{c:,}" for c in counts) + " requests" if counts else "n/a requests"


def _trace_panel(ax_ttft, ax_hit, panel) -> None:
    runs = panel.runs.assign(
        p50_s=pd.to_numeric(panel.runs["median_ttft_ms"]) / 1e3,
        p99_s=pd.to_numeric(panel.runs["p99_ttft_ms"]) / 1e3,
    )
    for i, (line, g) in enumerate(runs.groupby("line", sort=True)):
        c = colour(g["arm"].iloc[0])
        label = arm_label(runs.assign(series=runs["line"]), line)
        # Arms often coincide: earlier arms are drawn wider so later ones stay visible on top.
        style: dict[str, Any] = {"lw": 3.5 - 1.2 * min(i, 2), "ms": 9 - 2.5 * min(i, 2), "color": c}
        x = "kv_capacity_tokens"
        line_points(ax_ttft, g, x, "p50_s", log=True, marker="o", label=f"{label} p50", **style)
        line_points(
            ax_ttft, g, x, "p99_s", log=True, marker="s", ls="--", label=f"{line} p99", **style
        )
        line_points(ax_hit, g, x, "hit_rate", 100, marker="o", label=label, **style)
    fixed = f"{panel.title}; " if panel.title else ""
    ax_ttft.set(
        xscale="log",
        yscale="log",
        xlabel="KV capacity (tokens)",
        ylabel="TTFT (s, virtual clock)",
        title=f"TTFT p50 / p99 against KV capacity\n({fixed}{_requests(runs)})",
    )
    # Log TTFT with 1-2-5 labels: p50 and p99 differ by an order of magnitude.
    ax_ttft.yaxis.set_major_locator(PlainLogLocator())
    ax_ttft.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax_hit.set(
        xscale="log",
        xlabel="KV capacity (tokens)",
        ylabel="prompt tokens served from cache (%)",
        title="Hit rate against KV capacity" + (f"\n({panel.title})" if panel.title else ""),
    )
    caps = sorted(runs["kv_capacity_tokens"].dropna().unique())
    capacity_axes((ax_ttft, ax_hit), caps, legend_size=7)


def projected_overhead(inp: Inputs) -> list[str]:
    """Bars per preset (x) and engine (colour): bookkeeping / virtual duration, the 1% claim as a line."""
    table = projected_overhead_table(inp.runs)
    if table.empty:
        raise Skip("no simulated run of the unique workload with a hardware preset")
    presets = sorted(table["hardware"].unique())
    engines = sorted(table["engine"].unique())
    width = 0.8 / len(engines)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, engine in enumerate(engines):
        rows = table[table["engine"] == engine].set_index("hardware").reindex(presets)
        x = np.arange(len(presets)) + (i - (len(engines) - 1) / 2) * width
        share = rows["overhead_share"] * 100
        # An interval from MIN_INTERVAL_N runs on (stats.drawn_interval); the label gives n.
        shown = rows["n_runs"] >= MIN_INTERVAL_N
        err = [
            (share - rows["ci_low"] * 100).where(shown).fillna(0),
            (rows["ci_high"] * 100 - share).where(shown).fillna(0),
        ]
        n_runs = "/".join(str(int(n)) for n in rows["n_runs"].dropna().unique())
        ax.bar(
            x,
            share,
            width,
            yerr=err,
            capsize=2,
            color=colour(engine),
            label=f"{engine}: cache on minus cache off (n = {n_runs} runs per preset)",
        )
        ax.scatter(
            x,
            rows["gross_share"] * 100,
            marker="x",
            color="k",
            s=20,
            zorder=3,
            label="gross: cache-on bookkeeping alone" if i == 0 else None,
        )
        for xi, s, top in zip(x, share, (rows["ci_high"] * 100).where(shown).fillna(share)):
            if pd.notna(s):  # above the error bar, where it cannot be overdrawn
                ax.annotate(
                    f"{s:.2f}%",
                    (xi, max(s, top)),
                    textcoords="offset points",
                    xytext=(0, 3),
                    ha="center",
                    fontsize=6,
                )
    ax.axhline(0, color="k", lw=0.6)
    ax.axhline(
        VLLM_OVERHEAD_CLAIM * 100, color="r", ls=":", lw=1, label="1% (vLLM V1: < 1% at a 0% hit)"
    )
    ax.set_xticks(np.arange(len(presets)), presets, rotation=20, ha="right", fontsize=8)
    ax.set(
        ylabel="cache bookkeeping / run duration (%)",
        title="Projected 0%-hit overhead per hardware preset (bookkeeping timed on this CPU, duration simulated)",
    )
    ax.grid(axis="y", alpha=0.3)
    legend_outside(ax)  # clear of the bars, their labels and the gross markers
    runs = simulated(inp.runs)
    footnote(
        fig,
        runs[runs["workload"] == "unique"],
        f"mean over seeds, 95% t-interval where n >= {MIN_INTERVAL_N} | see projected_overhead.csv",
    )
    return [save(fig, inp, "projected_overhead")]
