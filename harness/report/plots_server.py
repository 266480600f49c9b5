"""Live-server figures: a server run's measured hit rate beside its twin's and the bounds.

Listed in the report's registry of figures, harness/report/registry.py.
`server_twin`: per server run (one bar group each: workload, load mode), the hit rate the server
reported, the twin's prediction from the same token streams, and the ideal / LRU / Belady bounds
of those streams at the server's block size and capacity; the subtitle counts exact requests.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.report.plots import Inputs, Skip, footnote, save

BARS = (
    ("hit_rate", "measured (server)"),
    ("predicted_hit_rate", "twin prediction"),
    ("ideal_hit_rate", "ideal (unbounded)"),
    ("theoretical_hit_rate_capped", "LRU at capacity"),
    ("belady_hit_rate", "Belady at capacity"),
)


def server_runs(runs: pd.DataFrame) -> pd.DataFrame:
    if "server_flavour" not in runs:
        return runs.iloc[0:0]
    return runs[runs["server_flavour"].notna()]


def server_twin(inputs: Inputs) -> list[str]:
    runs = server_runs(inputs.runs)
    if runs.empty:
        raise Skip("no live-server run")
    runs = runs.sort_values(["workload", "run_dir"])
    labels = [
        f"{r['workload']}\n{r.get('load_mode', '')}"
        + (" (1 at a time)" if r.get("one_at_a_time") is True else "")
        for _, r in runs.iterrows()
    ]
    x = np.arange(len(runs))
    width = 0.8 / len(BARS)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(runs)), 4.0))
    for i, (column, name) in enumerate(BARS):
        values = pd.to_numeric(
            runs.get(column, pd.Series(np.nan, index=runs.index)), errors="coerce"
        )
        ax.bar(x + (i - (len(BARS) - 1) / 2) * width, values * 100, width, label=name)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("prompt tokens served from cache (%)")
    ax.set_ylim(0, 100)
    matches = pd.to_numeric(runs.get("twin_matches"), errors="coerce").sum()
    total = pd.to_numeric(runs.get("twin_requests"), errors="coerce").sum()
    flavours = ", ".join(sorted(runs["server_flavour"].astype(str).unique()))
    ax.set_title(
        f"Live {flavours} server: measured vs twin vs bounds\n"
        f"{int(matches)} of {int(total)} requests predicted exactly",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    footnote(fig, runs, "twin: the built-in cache replayed on the streams actually sent")
    return [save(fig, inputs, "server_twin")]
