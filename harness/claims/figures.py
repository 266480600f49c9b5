"""One grouped bar chart per claim, drawn without pyplot (no global backend switch), PNG only."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure as MplFigure

from harness.claims.record import Figure
from harness.report.palette import series_colours


def draw(spec: Figure, path: Path) -> None:
    """Groups along x, one bar per series, the reference as a dashed line with its label."""
    series = list(dict.fromkeys(s for values in spec.groups.values() for s in values))
    colors = series_colours(series)  # the palette every figure shares
    fig = MplFigure(
        figsize=(max(5.0, 1.2 * len(spec.groups) * max(1, len(series)) ** 0.5 + 2), 3.4)
    )
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(spec.groups))]
        ys = [values.get(s, float("nan")) for values in spec.groups.values()]
        ax.bar(xs, ys, width=width, label=s, color=colors[s])
    if spec.reference is not None:
        ax.axhline(spec.reference, color="k", ls="--", lw=0.9, label=spec.reference_label or None)
    ax.set_xticks(
        range(len(spec.groups)),
        list(spec.groups),
        rotation=15 if len(spec.groups) > 3 else 0,
        fontsize=8,
    )
    ax.set_ylabel(spec.ylabel)
    ax.set_title(spec.title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
