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

from harness.report.palette import BOUND_COLOURS, TWIN_HATCH, colour
from harness.report.plots import Inputs, Skip, footnote, save

# (column, legend, how it is drawn): measured filled, the twin hatched, both in the server arm's
# colour; the bounds grey (palette.py), never the designs' colours
BARS = (
    ("hit_rate", "measured (server)", "measured"),
    ("predicted_hit_rate", "twin prediction", "twin"),
    ("ideal_hit_rate", "ideal (unbounded)", "ideal"),
    ("theoretical_hit_rate_capped", "LRU at capacity", "lru"),
    ("belady_hit_rate", "Belady at capacity", "belady"),
)


def server_runs(runs: pd.DataFrame) -> pd.DataFrame:
    if "server_flavour" not in runs:
        return runs.iloc[0:0]
    return runs[runs["server_flavour"].notna()]


def group_label(row: pd.Series) -> str:
    """`multiturn\nburst\nvllm 0.32.0, block 32`: the workload, how it was sent and which server,
    all read from the run's own config and summary."""
    if row.get("config.load.max_concurrency") == 1 or row.get("one_at_a_time") is True:
        sent = "1 at a time"
    elif row.get("config.load.mode") == "poisson" and pd.notna(row.get("config.load.rate")):
        sent = f"Poisson {row['config.load.rate']:g}/s"
    else:
        sent = str(row.get("load_mode") or row.get("config.load.mode") or "")
    g = row.get("granularity")
    server = f"{row.get('server') or row.get('server_flavour')}"
    if pd.notna(g):
        server += f", {'page' if row.get('server_flavour') == 'sglang' else 'block'} {int(g)}"
    return f"{row['workload']}\n{sent}\n{server}"


def _style(kind: str, arm: str) -> dict:
    if kind == "measured":
        return {"color": colour(arm)}
    if kind == "twin":
        return {"color": "white", "edgecolor": colour(arm), "hatch": TWIN_HATCH}
    return {"color": BOUND_COLOURS[kind]}


def server_twin(inputs: Inputs) -> list[str]:
    runs = server_runs(inputs.runs)
    if runs.empty:
        raise Skip("no live-server run")
    runs = runs.sort_values(["workload", "run_dir"])
    labels = [group_label(r) for _, r in runs.iterrows()]
    arms = runs["arm"].astype(str).tolist()
    x = np.arange(len(runs))
    width = 0.8 / len(BARS)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(runs)), 4.0))
    for i, (column, name, kind) in enumerate(BARS):
        values = pd.to_numeric(
            runs.get(column, pd.Series(np.nan, index=runs.index)), errors="coerce"
        )
        offset = (i - (len(BARS) - 1) / 2) * width
        for j, (xj, value, arm) in enumerate(zip(x, values * 100, arms)):
            label = name if j == 0 else None  # one legend entry per kind of bar
            ax.bar(xj + offset, value, width, label=label, linewidth=0.8, **_style(kind, arm))
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
