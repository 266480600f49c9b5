"""The report's figures (docs/benchmarking.md §9), each a function of the tidy tables, saved as PNG + SVG.

Every figure carries a title with units, a legend naming the arms (with block/page size and
policy), and a footnote with the configuration that produced it. A figure whose runs are absent
raises `Skip` with the reason; the report logs it and goes on.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import IO, NamedTuple

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.metrics.format import counted
from harness.report.figstyle import (
    colour,
    inside,
    on_clock,
    plain_ms_axis,
    platform_title,
    platforms,
    ratio_axis,
    safe_stem,
    series_style,
)
from harness.report.grouping import panels
from harness.report.stats import (
    MIN_INTERVAL_N,
    MeanCI,
    bounded_ci,
    drawn_interval,
    geometric_ci,
)
from harness.report.tables import PAIR_COLUMNS, overhead_table, unit
from harness.results.safe_write import SafeRoot

matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, smaller files


class Skip(Exception):
    """The runs this figure needs are absent (the message says which)."""


class Inputs(NamedTuple):
    runs: pd.DataFrame  # tidy runs, status ok only
    requests: pd.DataFrame  # requests of those runs
    pairs: pd.DataFrame  # overhead pairs (tables.overhead_pairs)
    out_dir: Path
    # stem -> the drawn Figure, left open, for callers that inspect the artists (tests); None
    # closes each figure once saved.
    keep: dict | None = None


def save(fig, inp: Inputs, *name: object) -> str:
    """Write `name` (joined and sanitised: names come from results) as PNG and SVG in the figures
    folder; the Figure stays open in `inp.keep` when the caller asked for it."""
    stem = safe_stem(*name)
    safe = SafeRoot(inp.out_dir)  # the figures folder: never a link, never written through one
    safe.mkdir()
    for suffix, dpi in (("png", 90), ("svg", None)):
        target = inside(inp.out_dir, stem, suffix)

        def draw(f: IO[bytes], s: str = suffix, d: int | None = dpi) -> None:
            fig.savefig(f, format=s, dpi=d, bbox_inches="tight")

        safe.write_atomic(target, draw, binary=True)
    if inp.keep is None:
        plt.close(fig)
    else:
        inp.keep[stem] = fig
    return stem


def _values(df: pd.DataFrame, column: str) -> str:
    vals = sorted({str(v) for v in df[column].dropna()}) if column in df else []
    return ", ".join(vals) if vals else "n/a"


def footnote(fig, df: pd.DataFrame, extra: str = "") -> None:
    caps = sorted({int(c) for c in df["kv_capacity_tokens"].dropna()})
    cap = ", ".join(f"{c:,}" for c in caps) if caps else "n/a"
    seeds = df["seed"].nunique()
    hardware = (
        f" | hardware {_values(df, 'hardware')}"
        if "hardware" in df and df["hardware"].notna().any()
        else ""
    )
    text = (
        f"model {_values(df, 'model')} | executor {_values(df, 'executor')}{hardware}"
        f" | KV capacity {cap} tokens"
        f" | n = {counted(len(df), 'run')} ({counted(seeds, 'seed')})"
        + (f" | {extra}" if extra else "")
    )
    # Below everything already drawn (rotated tick labels reach under the axes), never over it.
    lowest_in = fig.get_tightbbox(fig.canvas.get_renderer()).y0
    fig.text(
        0.01,
        min(-0.02, lowest_in / fig.get_figheight() - 0.02),
        wrapped(text, fig.get_figwidth()),
        fontsize=FOOTNOTE_PT,
        color="0.3",
        ha="left",
        va="top",
    )


# The footnote's size, and the widest character of its font at that size over the size (DejaVu
# Sans' digits and capitals reach 0.7 em): a line of width/char characters never leaves the figure.
FOOTNOTE_PT = 7
CHAR_EM = 0.7


def wrapped(text: str, width_in: float) -> str:
    """`text` broken into lines that fit `width_in` inches at FOOTNOTE_PT, between its " | "
    parts where one fits (a part longer than a line is broken between words). Matplotlib's own
    `wrap=True` measures the text word by word at every draw: a fifth of a report's time."""
    per_line = max(20, int(width_in * 72 * 0.98 / (FOOTNOTE_PT * CHAR_EM)))
    lines: list[str] = []
    for part in text.split(" | "):
        first, *rest = textwrap.wrap(part, per_line) or [""]
        if lines and len(lines[-1]) + 3 + len(first) <= per_line:
            lines[-1] += " | " + first
        else:
            lines.append(first)
        lines += rest
    return "\n".join(lines)


def arm_label(df: pd.DataFrame, arm: str) -> str:
    """`apc (block 16, fcfs)`, or for a series with varying keys `apc load.rate=8 (block 16, fcfs)`."""
    column = "series" if "series" in df and (df["series"] == arm).any() else "arm"
    row = df[df[column] == arm].iloc[0]
    g = "?" if pd.isna(row["granularity"]) else int(row["granularity"])
    if isinstance(row.get("server"), str):  # `vllm-server 0.32.0 (block 32, fcfs)`
        flavour, _, version = row["server"].partition(" ")
        granule = "page" if flavour == "sglang" else "block"
        return f"{arm} {version} ({granule} {g}, {row['policy']})"
    return f"{arm} ({unit(row['engine'])} {g}, {row['policy']})"


def main_config(runs: pd.DataFrame) -> pd.DataFrame:
    """Per workload, the runs of its most common KV capacity, load sweeps left out when other runs
    exist (capacity and load sweeps have figures of their own); call it on one platform's runs."""
    parts = []
    for _, group in runs.groupby("workload", sort=True):
        # A load sweep has its own figure (metric_vs_load); bars show the other runs when any.
        swept = (
            group["varies"].astype(str).str.contains(r"\bload\.", regex=True)
            if "varies" in group
            else None
        )
        if swept is not None and (~swept).any():
            group = group[~swept]
        parts += _most_common_capacity(group)
    return pd.concat(parts) if parts else runs


def _most_common_capacity(group: pd.DataFrame) -> list[pd.DataFrame]:
    """The runs of the most common KV capacity: of the built-in runs together (a capacity sweep
    shares its points across arms), and of each server arm apart (a server's pool is its own,
    so a vLLM, an SGLang and the built-in runs beside them all keep their bars)."""
    server = group["server"] if "server" in group else pd.Series(None, index=group.index)
    own = group["engine"].where(server.notna(), "")
    out = []
    for _, sub in group.groupby(own, sort=True):
        caps = sub["kv_capacity_tokens"]
        out.append(sub[caps == caps.value_counts().idxmax()] if caps.notna().any() else sub)
    return out


def _grouped_bars(
    ax, df: pd.DataFrame, column: str, scale: float = 1.0, log: bool = False
) -> dict[str, np.ndarray]:
    """The mean per workload (x) and series (colour by arm, hatch by variant): bars on a linear
    axis, points on a log one (a bar's length on a log axis is no ratio). A 95% t-interval is drawn
    from MIN_INTERVAL_N runs on (clipped at 0: every such quantity is non-negative; on a log axis
    the geometric mean and its interval on the log scale, stats.geometric_ci); below it each
    run is a point of its own. Returns series -> x."""
    workloads = sorted(df["workload"].unique())
    style = series_style(df)
    positions = {}
    series = sorted(style, key=lambda s: (s.split(" ")[0], s))
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        x = np.arange(len(workloads)) + (i - (len(series) - 1) / 2) * width
        cis, runs = [], []
        for w in workloads:
            vals = pd.to_numeric(
                df[(df["workload"] == w) & (df["series"] == name)][column], errors="coerce"
            ).dropna()
            vals = (vals * scale).tolist()
            runs.append(vals)
            cis.append(drawn_interval(_interval(vals, log)) if vals else None)
        means = np.array([np.nan if ci is None else ci.mean for ci in cis])
        errs = whiskers(cis)
        colour_ = style[name]["color"]
        label = arm_label(df, name)
        if log:
            ax.errorbar(x, means, yerr=errs, fmt="o", ms=5, capsize=2, color=colour_, label=label)
        else:
            ax.bar(
                x,
                means,
                width,
                yerr=errs,
                capsize=2,
                label=label,
                edgecolor="0.2",
                linewidth=0.4,
                **style[name],
            )
        run_points(ax, x, runs, cis, "k" if not log else colour_)
        positions[name] = x
    ax.set_xticks(np.arange(len(workloads)), workloads, rotation=30, ha="right", fontsize=8)
    return positions


def _interval(values: list[float], log: bool) -> MeanCI:
    """The mean and 95% t-interval a figure draws: arithmetic (clipped at 0) on a linear axis,
    geometric (interval on the log scale) on a log one, where zero has no place."""
    positive = [v for v in values if v > 0]
    if log and positive:
        return geometric_ci(positive)
    return bounded_ci(values, non_negative=True)


def whiskers(cis: list) -> list[list[float]]:
    """errorbar's [below, above] from intervals; 0 where there is none."""
    return [
        [0 if ci is None or ci.low is None else ci.mean - ci.low for ci in cis],
        [0 if ci is None or ci.high is None else ci.high - ci.mean for ci in cis],
    ]


def run_points(ax, x, runs: list[list[float]], cis: list, point_colour: str) -> None:
    """Each run as a small point where its group got no interval (fewer than MIN_INTERVAL_N)."""
    xs, ys = [], []
    for xi, vals, ci in zip(x, runs, cis):
        if ci is not None and ci.low is None and len(vals) > 1:
            xs += [xi] * len(vals)
            ys += vals
    if xs:
        ax.scatter(xs, ys, s=9, marker="D", color=point_colour, zorder=4, linewidths=0)


INTERVAL_NOTE = (
    f"95% t-interval where n >= {MIN_INTERVAL_N} runs, else each run a point; on log axes the "
    "geometric mean, its interval on the log scale"
)


def legend_outside(ax, fontsize: int = 7) -> None:
    """The legend right of the axes, where it cannot cover bars or other labels."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def ttft_cdf(inp: Inputs) -> list[str]:
    if inp.requests.empty or "ttft_ms" not in inp.requests:
        raise Skip("no request tables")
    written = []
    for suffix, platform_runs in platforms(inp.runs):
        runs = main_config(platform_runs)
        reqs = inp.requests.merge(
            runs[["run_id", "workload", "arm", "series"]], on="run_id", suffixes=("_req", "")
        )
        for workload, group in reqs.groupby("workload", sort=True):
            sub = runs[runs["workload"] == workload]
            fig, ax = plt.subplots(figsize=(7, 4))
            for series, g in group.groupby("series", sort=True):
                ttft = np.sort(pd.to_numeric(g["ttft_ms"], errors="coerce").dropna().to_numpy())
                if ttft.size:
                    ax.step(
                        ttft,
                        np.arange(1, ttft.size + 1) / ttft.size,
                        where="post",
                        color=colour(g["arm"].iloc[0]),
                        label=arm_label(sub, series),
                    )
            ax.set(
                xlabel=on_clock("TTFT (ms)", sub),
                ylabel="fraction of requests",
                title=f"TTFT CDF: {workload} ({platform_title(sub)})",
            )
            ax.grid(alpha=0.3)
            legend_outside(ax, 8)
            footnote(fig, sub, "requests pooled over seeds")
            written.append(save(fig, inp, "ttft_cdf", workload, suffix))
    return written


def latency_throughput(inp: Inputs) -> list[str]:
    panels = (
        ("median_ttft_ms", "TTFT p50 (ms)"),
        ("p99_ttft_ms", "TTFT p99 (ms)"),
        ("request_throughput", "throughput (req/s)"),
        ("total_token_throughput", "throughput (tok/s, in+out)"),
    )
    written = []
    for suffix, platform_runs in platforms(inp.runs):
        runs = main_config(platform_runs)
        fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
        for ax, (column, label) in zip(axes.flat, panels):
            log = "ttft" in column  # workloads span milliseconds to minutes
            _grouped_bars(ax, runs, column, log=log)
            label = on_clock(label, runs)
            ax.set(ylabel=label, title=label)
            if log:
                ax.set_yscale("log")
                plain_ms_axis(ax)
            ax.grid(axis="y", alpha=0.3)
        legend_outside(axes.flat[1])
        fig.suptitle(
            f"Latency and throughput by workload and arm ({platform_title(runs)}; mean over seeds, "
            "geometric on the log axes)"
        )
        fig.tight_layout()
        footnote(fig, runs, INTERVAL_NOTE)
        written.append(save(fig, inp, "latency_throughput", suffix))
    return written


def hit_rate(inp: Inputs) -> list[str]:
    written = []
    for suffix, platform_runs in platforms(inp.runs[inp.runs["cache_enabled"]]):
        runs = main_config(platform_runs)
        fig, ax = plt.subplots(figsize=(11, 4.5))
        positions = _grouped_bars(ax, runs, "hit_rate", scale=100)
        workloads = sorted(runs["workload"].unique())
        width = 0.8 / max(len(positions), 1)
        # Beside each other on the bar, so neither hides the other when they are equal.
        refs = (
            ("ideal_hit_rate", "_", 90, "k", -width / 4, "ideal (unbounded cache)"),
            ("belady_hit_rate", "x", 25, "crimson", width / 4, "Belady (at capacity)"),
        )
        for column, marker, size, mcolour, dx, label in refs:
            for i, (series, x) in enumerate(positions.items()):
                sub = runs[runs["series"] == series]
                vals = [
                    pd.to_numeric(sub[sub["workload"] == w][column], errors="coerce").mean() * 100
                    for w in workloads
                ]
                ax.scatter(
                    x + dx,
                    vals,
                    marker=marker,
                    s=size,
                    color=mcolour,
                    zorder=3,
                    label=label if i == 0 else None,
                )
        ax.set(
            ylabel="prompt tokens served from cache (%)",
            ylim=(0, 105),
            title=f"Achieved hit rate against the ideal and the Belady reference ({platform_title(runs)})",
        )
        ax.grid(axis="y", alpha=0.3)
        legend_outside(ax)
        footnote(
            fig,
            runs,
            f"ideal and Belady at each arm's block/page size, drawn on its bar | {INTERVAL_NOTE}",
        )
        written.append(save(fig, inp, "hit_rate", suffix))
    if not written:
        raise Skip("no cache-on runs")
    return written


CAPACITY = "config.engine.kv_capacity_tokens"


def capacity(inp: Inputs) -> list[str]:
    """Per workload and platform: hit rate and TTFT against KV capacity, one row of panels per
    group of runs that differ in nothing but the capacity, the seed and the arm (grouping.panels)."""
    written = []
    # Runs of a hardware preset have their own figure (plots_sim.trace_capacity), one per preset.
    generic = inp.runs[inp.runs["hardware"].isna()] if "hardware" in inp.runs else inp.runs
    generic = generic[generic["cache_enabled"]]
    for suffix, platform_runs in platforms(generic):
        for workload, runs in platform_runs.groupby("workload", sort=True):
            rows = swept_panels(runs, CAPACITY)
            if not rows:
                continue
            fig, axes = plt.subplots(len(rows), 2, figsize=(11, 4 * len(rows)), squeeze=False)
            for (ax_hit, ax_ttft), panel in zip(axes, rows):
                draw_capacity_panel(ax_hit, ax_ttft, panel)
            fig.suptitle(f"Capacity sweep: {workload} ({platform_title(runs)})")
            fig.tight_layout()
            footnote(fig, drawn_runs(rows), INTERVAL_NOTE)
            written.append(save(fig, inp, "capacity", workload, suffix))
    if not written:
        raise Skip("no workload was run at two or more KV capacities")
    return written


def swept_panels(runs: pd.DataFrame, variable: str, figure_keys=None) -> list:
    """The panels (grouping.panels) of `runs` whose runs span two or more values of `variable`,
    each with only its lines that do (a line of one capacity is no sweep). Panel titles name what
    sets the drawn panels apart, not the panels left out."""
    if variable not in runs:
        runs = runs.assign(**{variable: runs["kv_capacity_tokens"]})

    def split(df: pd.DataFrame) -> list:
        return panels(df, variable) if figure_keys is None else panels(df, variable, figure_keys)

    kept = []
    for panel in split(runs):
        spans = panel.runs.groupby("line")["kv_capacity_tokens"].transform("nunique")
        lines = panel.runs[spans >= 2]
        if lines["kv_capacity_tokens"].nunique() >= 2:
            kept.append(lines.drop(columns="line"))
    return split(pd.concat(kept)) if kept else []


def drawn_runs(rows: list) -> pd.DataFrame:
    """The runs the panels draw, for the footnote's counts (not those left out of every panel)."""
    return pd.concat([panel.runs for panel in rows])


def line_points(
    ax, g: pd.DataFrame, x: str, column: str, scale: float = 1.0, log: bool = False, **style
):
    """One line: the mean per x with a 95% t-interval whisker from MIN_INTERVAL_N runs, each run
    a point below that (`log`: for a log axis, the geometric mean and its interval on the log
    scale). Returns the line."""
    xs, cis, runs = [], [], []
    for xv, v in g.groupby(x, sort=True):
        vals = (pd.to_numeric(v[column], errors="coerce").dropna() * scale).tolist()
        if vals:
            xs.append(xv)
            runs.append(vals)
            cis.append(drawn_interval(_interval(vals, log)))
    means = [ci.mean for ci in cis]
    line = ax.errorbar(xs, means, yerr=whiskers(cis), capsize=2, **style)
    run_points(ax, xs, runs, cis, style.get("color", "k"))
    return line


def draw_capacity_panel(ax_hit, ax_ttft, panel) -> None:
    runs = panel.runs
    for line, g in runs.groupby("line", sort=True):
        arm = g["arm"].iloc[0]
        c = colour(arm)
        label = arm_label(runs.assign(series=runs["line"]), line)
        line_points(
            ax_hit,
            g,
            "kv_capacity_tokens",
            "hit_rate",
            100,
            marker="o",
            color=c,
            label=f"{label} measured",
        )
        for column, ls, name in (
            ("belady_hit_rate", ":", "Belady"),
            ("theoretical_hit_rate_capped", "--", "LRU simulator"),
        ):
            ax_hit.plot(
                g.groupby("kv_capacity_tokens")[column].mean() * 100,
                ls=ls,
                color=c,
                label=f"{line} {name}",
            )
        line_points(
            ax_ttft,
            g,
            "kv_capacity_tokens",
            "median_ttft_ms",
            log=True,
            marker="o",
            color=c,
            label=f"{line} p50",
        )
        line_points(
            ax_ttft,
            g,
            "kv_capacity_tokens",
            "p99_ttft_ms",
            log=True,
            marker="s",
            ls="--",
            color=c,
            label=f"{line} p99",
        )
    where = f"\n({panel.title})" if panel.title else ""
    ax_hit.set(
        xscale="log",
        xlabel="KV capacity (tokens)",
        ylabel="hit rate (%)",
        ylim=(0, 105),
        title=f"Hit rate against capacity{where}",
    )
    ax_ttft.set(
        xscale="log",
        yscale="log",
        xlabel="KV capacity (tokens)",
        ylabel=on_clock("TTFT (ms)", runs),
        title=f"TTFT against capacity{where}",
    )
    plain_ms_axis(ax_ttft)
    caps = sorted(runs["kv_capacity_tokens"].dropna().unique())
    capacity_axes((ax_hit, ax_ttft), caps, legend_size=6)


def capacity_axes(axes, caps, legend_size: int) -> None:
    """KV capacity on x: one labelled tick per measured capacity, no minor ticks, grid, legend."""
    for ax in axes:
        ax.set_xticks(caps, [f"{int(c):,}" for c in caps], fontsize=7, rotation=30)
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=legend_size)


def overhead(inp: Inputs) -> list[str]:
    """The 0%-hit on/off ratios per configuration: geometric means as points on a log ratio axis
    (a ratio's bar from 1 has no meaningful length), whiskers the 95% t-interval from
    MIN_INTERVAL_N pairs on, each pair's own ratio a point below that."""
    table = overhead_table(inp.pairs)
    if table.empty:
        raise Skip("no matched cache-on (0% hit) / cache-off pairs")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2]})
    metrics = sorted(
        table["metric"].unique(),
        key=["total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms"].index,
    )
    configs = table.groupby(list(PAIR_COLUMNS), dropna=False, sort=True)
    pair_groups = {  # the pairs of each configuration, keyed as text (a NaN key matches too)
        tuple(map(str, key)): group
        for key, group in inp.pairs.groupby(list(PAIR_COLUMNS), dropna=False)
    }
    # One colour per engine; its configurations (workloads, ...) told apart by the marker.
    markers: dict[tuple, str] = {}
    for key, _ in configs:
        engine = dict(zip(PAIR_COLUMNS, key))["engine"]
        markers[key] = CONFIG_MARKERS[
            sum(dict(zip(PAIR_COLUMNS, k))["engine"] == engine for k in markers)
            % len(CONFIG_MARKERS)
        ]
    # Keys beyond engine, workload and model that set one engine's configurations apart: in
    # their labels (the block/page size differs between engines, not within one).
    apart = [
        c
        for c in PAIR_COLUMNS
        if c not in ("engine", "workload", "model")
        and table[c].astype(str).groupby(table["engine"]).nunique().max() > 1
    ]
    for ax, shown in (
        (axes[0], ["total_token_throughput"]),
        (axes[1], [m for m in metrics if m != "total_token_throughput"]),
    ):
        width = 0.8 / max(len(configs), 1)
        for i, (key, g) in enumerate(configs):
            cfg = dict(zip(PAIR_COLUMNS, key))
            g = g.set_index("metric").reindex(shown)
            x = np.arange(len(shown)) + (i - (len(configs) - 1) / 2) * width
            enough = g["n_pairs"] >= MIN_INTERVAL_N  # stats.drawn_interval's rule
            err = [
                (g["ratio"] - g["ci_low"]).where(enough).fillna(0),
                (g["ci_high"] - g["ratio"]).where(enough).fillna(0),
            ]
            n = int(g["n_pairs"].max())
            c = colour(cfg["engine"])
            ax.errorbar(
                x,
                g["ratio"],
                yerr=err,
                fmt=markers[key],
                ms=6,
                capsize=3,
                color=c,
                label=f"{cfg['engine']} on/off ({cfg['workload']}, n={n} pairs, model {cfg['model']}"
                + "".join(f", {c}={_label_value(cfg[c])}" for c in apart)
                + ")",
            )
            pairs = pair_groups.get(tuple(map(str, key)), pd.DataFrame())
            values = [
                pairs[f"{m}_ratio"].dropna().tolist() if f"{m}_ratio" in pairs else []
                for m in shown
            ]
            cis = [
                MeanCI(r, None, None, int(k)) if k < MIN_INTERVAL_N else MeanCI(r, lo, hi, int(k))
                for r, lo, hi, k in zip(
                    g["ratio"], g["ci_low"], g["ci_high"], g["n_pairs"].fillna(0)
                )
            ]
            run_points(ax, x, values, cis, c)
            for xi, r in zip(x, g["ratio"]):
                ax.annotate(
                    f"{(r - 1) * 100:+.2f}%",
                    (xi, r),
                    textcoords="offset points",
                    xytext=(7, 0),
                    ha="left",
                    va="center",
                    fontsize=7,
                )
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(np.arange(len(shown)), shown, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].axhline(0.99, color="r", ls=":", lw=0.8, label="-1% (vLLM V1 claim)")
    axes[0].set(ylabel="cache on / cache off (log scale)", title="0%-hit throughput ratio")
    axes[1].set(
        ylabel="cache on / cache off (log scale)", title="0%-hit latency ratios (lower is better)"
    )
    lo = float(np.nanmin(table["ci_low"].fillna(table["ratio"])))
    hi = float(np.nanmax(table["ci_high"].fillna(table["ratio"])))
    if not inp.pairs.empty:  # the single pairs drawn where there is no interval
        ratios = inp.pairs[[f"{m}_ratio" for m in metrics]].to_numpy(dtype=float)
        lo, hi = min(lo, float(np.nanmin(ratios))), max(hi, float(np.nanmax(ratios)))
    for ax in axes:
        ax.set_yscale("log")  # before the limits: a scale change after them would rescale
        ax.set_ylim(min(lo, 0.98) * 0.97, max(hi, 1.02) * 1.03)
        ratio_axis(ax)
    legend_outside(axes[1])  # every series is in both panels; the -1% line only in the first
    handles, labels = axes[0].get_legend_handles_labels()
    claim = [(h, t) for h, t in zip(handles, labels) if t.startswith("-1%")]
    axes[0].legend(*zip(*claim), fontsize=7, loc="lower left")
    fig.suptitle(
        "0%-hit overhead: geometric mean of paired on/off ratios, 95% t-interval on the log scale"
        f" (n >= {MIN_INTERVAL_N} pairs, else each pair a point)"
    )
    fig.tight_layout()
    keys = [*PAIR_COLUMNS, "sweep", "seed"]  # the runs that formed the pairs, nothing else
    runs = inp.runs.merge(inp.pairs[keys].drop_duplicates(), on=keys)
    footnote(fig, runs)
    return [save(fig, inp, "overhead")]


CONFIG_MARKERS = ("o", "s", "^", "D", "v", "P")


def _label_value(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def bookkeeping(inp: Inputs) -> list[str]:
    written = []
    for suffix, platform_runs in platforms(inp.runs):
        runs = main_config(platform_runs)
        if runs["bookkeeping_share"].notna().sum() == 0:
            continue
        fig, ax = plt.subplots(figsize=(11, 4))
        _grouped_bars(ax, runs, "bookkeeping_share", scale=100)
        ax.set(
            ylabel="cache bookkeeping / duration (%)",
            title="Share of run time spent in cache bookkeeping (scheduler admission + finish)",
        )
        ax.grid(axis="y", alpha=0.3)
        legend_outside(ax)
        footnote(
            fig,
            runs,
            f"bookkeeping is wall time; duration is virtual time for simulated runs | {INTERVAL_NOTE}",
        )
        written.append(save(fig, inp, "bookkeeping", suffix))
    if not written:
        raise Skip("no run recorded cache_bookkeeping_ms and duration")
    return written
