"""The report's figures of load and of caching's payoff: metrics against request rate, speed-up over
caching off, and the TTFT of requests that hit the cache against those that missed.

Listed in the report's registry of figures, harness/report/registry.py. Each is
drawn once per platform (model, executor, hardware).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.report import grouping
from harness.report.figstyle import (
    colour,
    on_clock,
    plain_ms_axis,
    platform_title,
    platforms,
    ratio_axis,
    series_style,
)
from harness.report.plots import (
    INTERVAL_NOTE,
    Inputs,
    Skip,
    arm_label,
    drawn_runs,
    footnote,
    legend_outside,
    line_points,
    main_config,
    run_points,
    save,
    whiskers,
)
from harness.report.stats import MIN_INTERVAL_N, drawn_interval, ratio_ci

LOAD_KEYS = ("load.rate", "load.max_concurrency")  # the x axis of a load sweep, first found
# Cache-on and cache-off runs pair when all of these match (and the sweep and seed).
SPEEDUP_KEYS = ("workload", "engine", "kv_capacity_tokens", "model", "executor", "hardware")


def metric_vs_load(inp: Inputs) -> list[str]:
    """Per workload of a load sweep: TTFT p50, p99 and throughput against the load, a line per arm."""
    panels = (
        ("median_ttft_ms", "TTFT p50 (ms)"),
        ("p99_ttft_ms", "TTFT p99 (ms)"),
        ("request_throughput", "throughput (req/s)"),
    )
    written = []
    for suffix, runs in platforms(inp.runs):
        for workload, group in runs.groupby("workload", sort=True):
            key = next((k for k in LOAD_KEYS if k in " ".join(group["varies"]).split(", ")), None)
            if key is None or f"config.{key}" not in group:
                continue
            group = group.assign(
                load=pd.to_numeric(group[f"config.{key}"], errors="coerce")
            ).dropna(subset=["load"])
            if group["load"].nunique() < 2:
                continue
            rows = [
                p for p in grouping.panels(group, f"config.{key}") if p.runs["load"].nunique() >= 2
            ]
            if not rows:
                continue
            fig, axes = plt.subplots(len(rows), 3, figsize=(14, 4 * len(rows)), squeeze=False)
            for row_axes, panel in zip(axes, rows):
                _load_panels(row_axes, panel, key, panels)
            legend_outside(axes[0][-1])
            fig.suptitle(
                f"Latency and throughput against load: {workload} ({platform_title(group)}; mean over seeds)"
            )
            fig.tight_layout()
            footnote(fig, drawn_runs(rows), INTERVAL_NOTE)
            written.append(save(fig, inp, "metric_vs_load", workload, suffix))
    if not written:
        raise Skip("no workload was run at two or more request rates or concurrencies")
    return written


def _load_panels(axes, panel, key: str, metrics) -> None:
    """One row: each metric against the load, a line per arm (points and whiskers: log axes)."""
    runs = panel.runs
    for ax, (column, label) in zip(axes, metrics):
        for line, g in runs.groupby("line", sort=True):
            line_points(
                ax,
                g,
                "load",
                column,
                log="ttft" in column,  # the TTFT axes are log
                marker="o",
                color=colour(g["arm"].iloc[0]),
                label=arm_label(runs.assign(series=runs["line"]), line),
            )
        ax.set(
            xscale="log",
            xlabel=key + (" (req/s)" if key == "load.rate" else ""),
            ylabel=on_clock(label, runs),
            title=label + (f"\n({panel.title})" if panel.title else ""),
        )
        loads = sorted(runs["load"].unique())
        ax.set_xticks(loads, [f"{v:g}" for v in loads], fontsize=7)
        ax.minorticks_off()
        if "ttft" in column:
            ax.set_yscale("log")
            plain_ms_axis(ax)
        ax.grid(alpha=0.3)


def speedup_pairs(runs: pd.DataFrame) -> pd.DataFrame:
    """Each cache-on run with the cache-off run of its engine, workload, platform, sweep and seed:
    TTFT speed-up (off / on mean TTFT) and throughput gain (on / off)."""
    keys = [*SPEEDUP_KEYS, "sweep", "seed"]
    cols = [*keys, "series", "arm", "mean_ttft_ms", "total_token_throughput"]
    if runs.empty or not set(cols) <= set(runs.columns):
        return pd.DataFrame()
    on = runs[runs["cache_enabled"]][cols]
    off = runs[~runs["cache_enabled"]][cols].drop_duplicates(keys)
    pairs = on.merge(off, on=keys, how="inner", suffixes=("", "_off"))
    pairs["ttft_speedup"] = pd.to_numeric(pairs["mean_ttft_ms_off"]) / pd.to_numeric(
        pairs["mean_ttft_ms"]
    )
    pairs["throughput_gain"] = pd.to_numeric(pairs["total_token_throughput"]) / pd.to_numeric(
        pairs["total_token_throughput_off"]
    )
    return pairs


def speedup(inp: Inputs) -> list[str]:
    """Per workload and arm: how much faster caching makes TTFT and throughput than caching off."""
    written = []
    for suffix, runs in platforms(inp.runs):
        shown = main_config(runs)
        pairs = speedup_pairs(shown)
        if pairs.empty:
            continue
        keys = [*SPEEDUP_KEYS, "sweep", "seed"]  # the cache-on and -off runs that formed pairs
        paired = shown.merge(pairs[keys].drop_duplicates(), on=keys)
        workloads = sorted(pairs["workload"].unique())
        series = sorted(pairs["series"].unique())
        style = series_style(pairs)
        width = 0.8 / len(series)
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        for ax, column, label in (
            (axes[0], "ttft_speedup", "mean TTFT speed-up (off / on)"),
            (axes[1], "throughput_gain", "throughput gain (on / off, tok/s)"),
        ):
            for i, name in enumerate(series):
                cis = [
                    _ratio(pairs[(pairs["workload"] == w) & (pairs["series"] == name)][column])
                    for w in workloads
                ]
                x = np.arange(len(workloads)) + (i - (len(series) - 1) / 2) * width
                means = np.array([np.nan if ci is None else ci.mean for ci in cis])
                # A ratio on a log axis: a point with its whisker (a bar's length is no ratio).
                ax.errorbar(
                    x,
                    means,
                    yerr=whiskers(cis),
                    fmt="o",
                    ms=5,
                    capsize=2,
                    color=style[name]["color"],
                    label=arm_label(runs, name),
                )
                values = [
                    pairs[(pairs["workload"] == w) & (pairs["series"] == name)][column]
                    .dropna()
                    .tolist()
                    for w in workloads
                ]
                run_points(ax, x, values, cis, style[name]["color"])
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
            ax.set(ylabel=label, title=label)
            ax.grid(axis="y", alpha=0.3)
            ratio_axis(ax)
        legend_outside(axes[1])
        fig.suptitle(
            f"Speed-up over caching off ({platform_title(runs)}; geometric mean of per-seed ratios)"
        )
        fig.tight_layout()
        footnote(
            fig,
            paired,
            "pairs: same engine, workload, capacity, sweep and seed | 95% t-interval on the log "
            f"scale where n >= {MIN_INTERVAL_N} pairs, else each pair a point",
        )
        written.append(save(fig, inp, "speedup", suffix))
    if not written:
        raise Skip("no cache-on run has a cache-off run of the same engine, workload and seed")
    return written


def _ratio(values: pd.Series):
    vals = pd.to_numeric(values, errors="coerce").dropna()
    vals = vals[np.isfinite(vals) & (vals > 0)]
    return drawn_interval(ratio_ci(vals.tolist())) if len(vals) else None


def ttft_hit_miss(inp: Inputs) -> list[str]:
    """Per workload and arm: TTFT of requests that reused cached tokens against those that did not
    (median, whiskers to p10 and p90), requests pooled over seeds."""
    need = {"run_id", "ttft_ms", "cached_tokens"}
    if inp.requests.empty or not need <= set(inp.requests.columns):
        raise Skip("no request tables")
    written = []
    for suffix, runs in platforms(inp.runs[inp.runs["cache_enabled"]]):
        runs = main_config(runs)
        reqs = inp.requests[list(need)].merge(
            runs[["run_id", "workload", "series", "arm"]], on="run_id"
        )
        if reqs.empty:
            continue
        reqs = reqs.assign(
            hit=pd.to_numeric(reqs["cached_tokens"]) > 0, ttft=pd.to_numeric(reqs["ttft_ms"])
        )
        workloads = sorted(reqs["workload"].unique())
        series = sorted(reqs["series"].unique())
        width = 0.8 / (2 * len(series))
        fig, ax = plt.subplots(figsize=(13, 4.5))
        for i, name in enumerate(series):
            arm = reqs[reqs["series"] == name]["arm"].iloc[0]
            for j, hit in enumerate((True, False)):
                stats = [
                    _spread(
                        reqs[
                            (reqs["workload"] == w)
                            & (reqs["series"] == name)
                            & (reqs["hit"] == hit)
                        ]["ttft"]
                    )
                    for w in workloads
                ]
                x = np.arange(len(workloads)) + ((2 * i + j) - (2 * len(series) - 1) / 2) * width
                med = np.array([s[1] for s in stats])
                # Whiskers p10-p90 from MIN_INTERVAL_N requests on; a log axis: points, no bars.
                err = [
                    np.nan_to_num(med - np.array([s[0] for s in stats])),
                    np.nan_to_num(np.array([s[2] for s in stats]) - med),
                ]
                ax.errorbar(
                    x,
                    med,
                    yerr=err,
                    fmt="o" if hit else "s",
                    ms=5,
                    capsize=1.5,
                    color=colour(arm),
                    mfc=colour(arm) if hit else "white",
                    label=f"{arm_label(runs, name)}: {'hit' if hit else 'miss'}",
                )
        ax.set_yscale("log")
        plain_ms_axis(ax)
        ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
        ax.set(
            ylabel=on_clock("TTFT (ms)", runs),
            title=f"TTFT of requests that hit the cache (filled) and missed it (hollow) ({platform_title(runs)})",
        )
        ax.grid(axis="y", alpha=0.3)
        legend_outside(ax)
        footnote(
            fig,
            runs,
            f"median per group, whiskers p10-p90 (requests pooled over seeds, none below n = {MIN_INTERVAL_N}); "
            "a hit reused at least one cached prompt token",
        )
        written.append(save(fig, inp, "ttft_hit_miss", suffix))
    if not written:
        raise Skip("no cache-on run with a request table")
    return written


def _spread(values: pd.Series) -> tuple[float, float, float]:
    """(p10, median, p90); p10 = p90 = median below MIN_INTERVAL_N requests (no whisker)."""
    vals = values.dropna().to_numpy()
    if not vals.size:
        return (np.nan, np.nan, np.nan)
    if vals.size < MIN_INTERVAL_N:
        med = float(np.median(vals))
        return (med, med, med)
    p10, p50, p90 = (float(v) for v in np.percentile(vals, [10, 50, 90]))
    return p10, p50, p90
