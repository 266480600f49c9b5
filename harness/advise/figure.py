"""The grid's figure: per goal, every cell's value under each arrival pattern (mean over seeds),
each cell in its colour of every report figure (harness/report/palette.py), the answer's cell per
pattern marked with a black edge and a star."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from harness.advise.verdict import Answer, user_runs
from harness.report.figstyle import colour, on_clock
from harness.report.plots import plt


def draw(runs: pd.DataFrame, answers: list[Answer], where: dict[str, str], out: Path) -> Path:
    df = user_runs(runs)
    patterns = list(dict.fromkeys(df["pattern"]))
    cells = list(dict.fromkeys(df["cell"]))
    fig, axes = plt.subplots(1, len(answers), figsize=(4.2 * len(answers), 4.2), squeeze=False)
    width = 0.8 / len(cells)
    x = np.arange(len(patterns))
    for ax, ans in zip(axes[0], answers):
        means = df.groupby(["pattern", "cell"])[ans.goal.key].mean()
        marked = {d.pattern: d.best.get(d.winner) for d in ans.duels}
        for i, cell in enumerate(cells):
            values = [means.get((p, cell), np.nan) for p in patterns]
            scale = 100.0 if ans.goal.absolute else 1.0
            pos = x - 0.4 + (i + 0.5) * width
            edges = ["black" if marked.get(p) == cell else "none" for p in patterns]
            ax.bar(
                pos,
                [scale * v for v in values],
                width,
                color=colour(cell),
                label=cell,
                edgecolor=edges,
                linewidth=1.5,
            )
            for px, v, e in zip(pos, values, edges):
                if e == "black" and not np.isnan(v):
                    ax.annotate("*", (px, scale * v), ha="center", va="bottom", fontsize=12)
        unit = "%" if ans.goal.absolute else "tok/s" if ans.goal.higher_is_better else "ms"
        ax.set_title(f"{ans.goal.name}\n{textwrap.fill(ans.verdict, 55)}", fontsize=7)
        label = f"{ans.goal.name} ({unit})"
        ax.set_ylabel(label if ans.goal.absolute else on_clock(label, runs))
        ax.set_xticks(x, [where.get(p, p) for p in patterns], rotation=15, fontsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(cells), 6), fontsize=7)
    fig.suptitle(
        "Advice grid: each cell per arrival pattern (* = the answer's cell, at your capacity)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 0.93))
    path = out / "grid.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
