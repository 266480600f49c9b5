"""What every report figure shares: a fixed colour per arm (harness/report/palette.py, shared
with the claims), safe file names, one figure per platform (model, executor, hardware), plain
millisecond tick labels.

File names are built from names read back from results (workloads, models, presets), so they are
sanitised here and `save` refuses any path that would leave the figures folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from harness.report.palette import colour  # re-exported: plots draw arms through figstyle

HATCHES = ("", "//", "..", "xx", "\\\\", "oo")
PLATFORM = ("model", "executor", "hardware")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def safe_stem(*parts: object) -> str:
    """A file stem from names read out of results: only letters, digits and . _ + -, never a path."""
    text = "_".join(
        _UNSAFE.sub("-", str(p)).strip(".-") for p in parts if str(p) not in ("", "None", "nan")
    )
    return text[:150] or "figure"


def inside(out_dir: Path, stem: str, suffix: str) -> Path:
    """out_dir/stem.suffix, refusing anything that resolves outside out_dir."""
    path = (out_dir / f"{stem}.{suffix}").resolve()
    if path.parent != out_dir.resolve():
        raise ValueError(f"figure name {stem!r} leaves {out_dir}")
    return path


def platforms(runs: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame]]:
    """(stem suffix, runs) per platform: always model_executor[_hw], so a figure's file name never
    depends on which other platforms the results folder holds."""
    keys = [k for k in PLATFORM if k in runs]
    groups = list(runs.groupby(keys, dropna=False, sort=True)) if keys else [((), runs)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        yield safe_stem(*key), group


def is_virtual(runs: pd.DataFrame) -> bool:
    """Simulated runs: their durations and latencies are the cost model's virtual time."""
    return "executor" in runs and bool((runs["executor"] == "simulated").any())


def on_clock(label: str, runs: pd.DataFrame) -> str:
    """A time or rate axis label, marked `virtual clock` for simulated runs (their durations and
    latencies are the cost model's, not time that passed); unchanged for the wall clock."""
    if not is_virtual(runs):
        return label
    return f"{label[:-1]}, virtual clock)" if label.endswith(")") else f"{label} (virtual clock)"


def platform_title(runs: pd.DataFrame) -> str:
    parts = [
        f"{k} {runs[k].dropna().iloc[0]}" for k in PLATFORM if k in runs and runs[k].notna().any()
    ]
    return ", ".join(parts)


class PlainLogLocator(LogLocator):
    """Log ticks at 1, 2, 5 x 10^k; at every integer multiple where the view holds fewer than
    three of those (a narrow range would otherwise carry one label or none)."""

    def __init__(self) -> None:
        super().__init__(base=10, subs=(1.0, 2.0, 5.0))

    def tick_values(self, vmin, vmax):
        ticks = super().tick_values(vmin, vmax)
        low, high = sorted((vmin, vmax))
        if sum(low <= t <= high for t in ticks) >= 3:
            return ticks
        return LogLocator(base=10, subs=tuple(float(i) for i in range(1, 10))).tick_values(
            vmin, vmax
        )


def plain_ms_axis(ax, axis: str = "y") -> None:
    """Log axis labelled 1, 2, 5, 10, 20, ... in plain numbers (no 10^x)."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(PlainLogLocator())
    target.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def ratio_axis(ax) -> None:
    """Log-scale ratio axis with plain labels (0.5x, 1x, 2x; 0.9x, 1x, 1.1x near 1). Call it after
    drawing: the tick choice depends on the data's range."""
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    wide = high / low > 3
    ax.yaxis.set_major_locator(
        LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)) if wide else MaxNLocator(nbins=6)
    )
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def series_style(runs: pd.DataFrame) -> dict[str, dict]:
    """Colour by arm, hatch by the series' position among its arm's series (e.g. load.rate values)."""
    style = {}
    for arm, group in runs.groupby("arm", sort=True):
        for i, series in enumerate(sorted(group["series"].unique())):
            style[series] = {"color": colour(arm), "hatch": HATCHES[i % len(HATCHES)]}
    return style
