"""The report's figures (docs/benchmarking.md §9), each a function of the tidy tables, saved as PNG + SVG.

Every figure carries a title with units, a legend naming the arms (with block/page size and
policy), and a footnote with the configuration that produced it. A figure whose runs are absent
raises `Skip` with the reason; the report logs it and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.stats import mean_ci
from harness.tables import PAIR_COLUMNS, overhead_table

matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, smaller files


class Skip(Exception):
    """The runs this figure needs are absent (the message says which)."""


class Inputs(NamedTuple):
    runs: pd.DataFrame  # tidy runs, status ok only
    requests: pd.DataFrame  # requests of those runs
    pairs: pd.DataFrame  # overhead pairs (tables.overhead_pairs)
    out_dir: Path


FIGURES: dict[str, Callable[[Inputs], list[str]]] = {}


def figure(name: str):
    def register(fn):
        FIGURES[name] = fn
        return fn

    return register


def save(fig, out_dir: Path, stem: str) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{stem}.png", dpi=90, bbox_inches="tight")
    fig.savefig(out_dir / f"{stem}.svg", bbox_inches="tight")
    plt.close(fig)
    return stem


def _values(df: pd.DataFrame, column: str) -> str:
    vals = sorted({str(v) for v in df[column].dropna()}) if column in df else []
    return ", ".join(vals) if vals else "n/a"


def footnote(fig, df: pd.DataFrame, extra: str = "") -> None:
    caps = sorted({int(c) for c in df["kv_capacity_tokens"].dropna()})
    cap = ", ".join(f"{c:,}" for c in caps) if caps else "n/a"
    seeds = df["seed"].nunique()
    text = (f"model {_values(df, 'model')} | executor {_values(df, 'executor')} | KV capacity {cap} tokens"
            f" | n = {len(df)} runs ({seeds} seeds)" + (f" | {extra}" if extra else ""))  # fmt: skip
    fig.text(0.01, -0.02, text, fontsize=7, color="0.3", ha="left", va="top", wrap=True)


def arm_label(df: pd.DataFrame, arm: str) -> str:
    row = df[df["arm"] == arm].iloc[0]
    unit = "page" if row["engine"] == "radix" else "block"
    g = "?" if pd.isna(row["granularity"]) else int(row["granularity"])
    return f"{arm} ({unit} {g}, {row['policy']})"


def main_config(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload, the runs of its most common (model, executor, capacity) configuration."""
    keys = ["model", "executor", "kv_capacity_tokens"]
    parts = []
    for _, group in runs.groupby("workload", sort=True):
        top = group.groupby(keys, dropna=False).size().idxmax()
        mask = np.logical_and.reduce([group[k].eq(v) | (group[k].isna() & pd.isna(v)) for k, v in zip(keys, top)])
        parts.append(group[mask])
    return pd.concat(parts) if parts else runs


def _grouped_bars(ax, df: pd.DataFrame, column: str, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Bars of the mean per workload (x) and arm (colour) with 95% t-intervals; arm -> bar x."""
    workloads = sorted(df["workload"].unique())
    positions = {}
    arms = sorted(df["arm"].unique())
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        means, errs = [], [[], []]
        for w in workloads:
            vals = pd.to_numeric(df[(df["workload"] == w) & (df["arm"] == arm)][column], errors="coerce").dropna()
            if vals.empty:
                means.append(np.nan), errs[0].append(0), errs[1].append(0)
                continue
            ci = mean_ci((vals * scale).tolist())
            means.append(ci.mean)
            errs[0].append(0 if ci.low is None else ci.mean - ci.low)
            errs[1].append(0 if ci.high is None else ci.high - ci.mean)
        x = np.arange(len(workloads)) + (i - (len(arms) - 1) / 2) * width
        ax.bar(x, means, width, yerr=errs, capsize=2, label=arm_label(df, arm))
        positions[arm] = x
    ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
    return positions


@figure("ttft_cdf")
def ttft_cdf(inp: Inputs) -> list[str]:
    if inp.requests.empty or "ttft_ms" not in inp.requests:
        raise Skip("no request tables")
    runs = main_config(inp.runs)
    reqs = inp.requests.merge(runs[["run_id", "workload", "arm"]], on="run_id", suffixes=("_req", ""))
    written = []
    for workload, group in reqs.groupby("workload", sort=True):
        sub = runs[runs["workload"] == workload]
        fig, ax = plt.subplots(figsize=(6, 4))
        for arm, g in group.groupby("arm", sort=True):
            ttft = np.sort(pd.to_numeric(g["ttft_ms"], errors="coerce").dropna().to_numpy())
            if ttft.size:
                ax.step(ttft, np.arange(1, ttft.size + 1) / ttft.size, where="post", label=arm_label(sub, arm))
        ax.set(xlabel="TTFT (ms)", ylabel="fraction of requests", title=f"TTFT CDF: {workload}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        footnote(fig, sub, "requests pooled over seeds")
        written.append(save(fig, inp.out_dir, f"ttft_cdf_{workload}"))
    return written


@figure("latency_throughput")
def latency_throughput(inp: Inputs) -> list[str]:
    runs = main_config(inp.runs)
    panels = (("median_ttft_ms", "TTFT p50 (ms)"), ("p99_ttft_ms", "TTFT p99 (ms)"),
              ("request_throughput", "throughput (req/s)"), ("total_token_throughput", "throughput (tok/s, in+out)"))  # fmt: skip
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (column, label) in zip(axes.flat, panels):
        _grouped_bars(ax, runs, column)
        ax.set(ylabel=label, title=label)
        if "ttft" in column:  # workloads span milliseconds to minutes
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Latency and throughput by workload and arm (mean over seeds, 95% t-interval)")
    fig.tight_layout()
    footnote(fig, runs)
    return [save(fig, inp.out_dir, "latency_throughput")]


@figure("hit_rate")
def hit_rate(inp: Inputs) -> list[str]:
    runs = main_config(inp.runs[inp.runs["cache_enabled"]])
    if runs.empty:
        raise Skip("no cache-on runs")
    fig, ax = plt.subplots(figsize=(10, 4.5))
    positions = _grouped_bars(ax, runs, "hit_rate", scale=100)
    workloads = sorted(runs["workload"].unique())
    refs = (("ideal_hit_rate", "_", 120, "ideal (unbounded cache)"), ("belady_hit_rate", "x", 30, "Belady (at capacity)"))
    for column, marker, size, label in refs:
        for i, (arm, x) in enumerate(positions.items()):
            sub = runs[runs["arm"] == arm]
            vals = [pd.to_numeric(sub[sub["workload"] == w][column], errors="coerce").mean() * 100 for w in workloads]
            ax.scatter(x, vals, marker=marker, s=size, color="k", zorder=3, label=label if i == 0 else None)
    ax.set(ylabel="prompt tokens served from cache (%)", ylim=(0, 105),
           title="Achieved hit rate against the ideal and the Belady reference")  # fmt: skip
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    footnote(fig, runs, "ideal and Belady at each arm's block/page size, drawn on its bar")
    return [save(fig, inp.out_dir, "hit_rate")]


@figure("capacity")
def capacity(inp: Inputs) -> list[str]:
    written = []
    # Runs of a hardware preset have their own figure (plots_sim.trace_capacity), one per preset.
    generic = inp.runs[inp.runs["hardware"].isna()] if "hardware" in inp.runs else inp.runs
    for (workload, model, executor), runs in generic.groupby(["workload", "model", "executor"], sort=True):
        runs = runs[runs["cache_enabled"]]
        if runs["kv_capacity_tokens"].nunique() < 2:
            continue
        fig, (ax_hit, ax_ttft) = plt.subplots(1, 2, figsize=(11, 4))
        for arm, g in runs.groupby("arm", sort=True):
            by_cap = g.groupby("kv_capacity_tokens")
            line = ax_hit.plot(by_cap["hit_rate"].mean() * 100, marker="o", label=f"{arm_label(runs, arm)} measured")[0]
            ax_hit.plot(by_cap["belady_hit_rate"].mean() * 100, ls=":", color=line.get_color(), label=f"{arm} Belady")
            ax_hit.plot(by_cap["theoretical_hit_rate_capped"].mean() * 100, ls="--", color=line.get_color(), label=f"{arm} LRU simulator")
            ax_ttft.plot(by_cap["median_ttft_ms"].mean(), marker="o", color=line.get_color(), label=f"{arm} p50")
            ax_ttft.plot(by_cap["p99_ttft_ms"].mean(), marker="s", ls="--", color=line.get_color(), label=f"{arm} p99")
        ax_hit.set(xscale="log", xlabel="KV capacity (tokens)", ylabel="hit rate (%)", ylim=(0, 105), title="Hit rate against capacity")
        ax_ttft.set(xscale="log", xlabel="KV capacity (tokens)", ylabel="TTFT (ms)", title="TTFT against capacity")
        caps = sorted(runs["kv_capacity_tokens"].dropna().unique())
        capacity_axes((ax_hit, ax_ttft), caps, legend_size=6)
        fig.suptitle(f"Capacity sweep: {workload}")
        fig.tight_layout()
        footnote(fig, runs)
        written.append(save(fig, inp.out_dir, f"capacity_{workload}_{model}_{executor}"))
    if not written:
        raise Skip("no workload was run at two or more KV capacities")
    return written


def capacity_axes(axes, caps, legend_size: int) -> None:
    """KV capacity on x: one labelled tick per measured capacity, no minor ticks, grid, legend."""
    for ax in axes:
        ax.set_xticks(caps, [f"{int(c):,}" for c in caps], fontsize=7, rotation=30)
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)


@figure("overhead")
def overhead(inp: Inputs) -> list[str]:
    table = overhead_table(inp.pairs)
    if table.empty:
        raise Skip("no matched cache-on (0% hit) / cache-off pairs")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2]})
    metrics = sorted(table["metric"].unique(), key=["total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms"].index)
    configs = table.groupby(["workload", "engine", "model", "executor"], sort=True)
    for ax, shown in ((axes[0], ["total_token_throughput"]), (axes[1], [m for m in metrics if m != "total_token_throughput"])):
        width = 0.8 / max(len(configs), 1)
        for i, ((workload, engine, _model, _executor), g) in enumerate(configs):
            g = g.set_index("metric").reindex(shown)
            x = np.arange(len(shown)) + (i - (len(configs) - 1) / 2) * width
            err = [(g["ratio"] - g["ci_low"]).fillna(0), (g["ci_high"] - g["ratio"]).fillna(0)]
            n = int(g["n_pairs"].max())
            ax.bar(x, g["ratio"] - 1, width, bottom=1, yerr=err, capsize=3, label=f"{engine} on/off ({workload}, n={n} pairs)")
            for xi, r in zip(x, g["ratio"]):
                ax.annotate(f"{(r - 1) * 100:+.2f}%", (xi, r), textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(shown)), shown, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].axhline(0.99, color="r", ls=":", lw=0.8, label="-1% (vLLM V1 claim)")
    axes[0].legend(fontsize=7, loc="lower right")
    axes[0].set(ylabel="cache on / cache off", title="0%-hit throughput ratio")
    axes[1].set(ylabel="cache on / cache off", title="0%-hit latency ratios (lower is better)")
    lo = float(np.nanmin(table["ci_low"].fillna(table["ratio"])))
    hi = float(np.nanmax(table["ci_high"].fillna(table["ratio"])))
    for ax in axes:
        ax.set_ylim(min(lo, 0.98) - 0.01, max(hi, 1.02) + 0.02)
    fig.suptitle("0%-hit overhead: mean of paired on/off ratios, 95% Student-t interval over interleaved seeds")
    fig.tight_layout()
    keys = [*PAIR_COLUMNS, "sweep", "seed"]  # the runs that formed the pairs, nothing else
    runs = inp.runs.merge(inp.pairs[keys].drop_duplicates(), on=keys)
    footnote(fig, runs)
    return [save(fig, inp.out_dir, "overhead")]


@figure("bookkeeping")
def bookkeeping(inp: Inputs) -> list[str]:
    runs = main_config(inp.runs)
    if runs["bookkeeping_share"].notna().sum() == 0:
        raise Skip("no run recorded cache_bookkeeping_ms and duration")
    fig, ax = plt.subplots(figsize=(10, 4))
    _grouped_bars(ax, runs, "bookkeeping_share", scale=100)
    ax.set(ylabel="cache bookkeeping / duration (%)", title="Share of run time spent in cache bookkeeping (scheduler admission + finish)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    footnote(fig, runs, "bookkeeping is wall time; duration is virtual time for simulated runs")
    return [save(fig, inp.out_dir, "bookkeeping")]
