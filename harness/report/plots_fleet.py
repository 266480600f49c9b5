"""Fleet figures (docs/fleet.md §4), listed in harness/report/registry.py.

`fleet_routers`: one figure per fleet sweep (workload, hardware, replicas, capacity, load): per
router and cache design, the fleet's hit rate against the bound no router can beat and Belady at
the fleet's capacity of the same stream (lines), its p90 TTFT, and its load imbalance.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.report.figstyle import on_clock
from harness.report.fleet_table import KEY, fleet_runs, fleet_table
from harness.report.plots import Inputs, Skip, save


def fleet_routers(inputs: Inputs) -> list[str]:
    table = fleet_table(inputs.runs)
    if table.empty:
        raise Skip("no fleet run (fleet.replicas > 1)")
    runs = fleet_runs(inputs.runs)
    stems = []
    for key, group in table.groupby(KEY, dropna=False):
        stems.append(_sweep_figure(inputs, dict(zip(KEY, key)), group, _sweep_runs(runs, key)))
    return stems


def _sweep_runs(runs: pd.DataFrame, key: tuple) -> pd.DataFrame:
    """The runs of one sweep (a missing value, such as a real run's hardware, matches missing)."""
    keep = pd.Series(True, index=runs.index)
    for column, value in zip(KEY, key):
        keep &= runs[column].isna() if pd.isna(value) else runs[column] == value
    return runs[keep]


def _sweep_figure(inputs: Inputs, key: dict, group: pd.DataFrame, runs: pd.DataFrame) -> str:
    routers = sorted(group["router"].unique())
    engines = sorted(group["engine"].unique())
    x = np.arange(len(routers))
    width = 0.8 / len(engines)
    fig, axes = plt.subplots(1, 3, figsize=(max(9.0, 1.2 * len(routers) * 3), 3.8))
    panels = (
        ("fleet_hit_rate", "prompt tokens from cache (%)", 100.0),
        # A simulated fleet's TTFT is the cost model's virtual time: the axis says so.
        ("p90_ttft_ms", on_clock("p90 TTFT (ms)", runs), 1.0),
        ("load_imbalance", "load imbalance (max / mean requests)", 1.0),
    )
    for ax, (col, label, scale) in zip(axes, panels):
        for j, engine in enumerate(engines):
            rows = group[group["engine"] == engine].set_index("router").reindex(routers)
            ax.bar(x + (j - (len(engines) - 1) / 2) * width, rows[col] * scale, width, label=engine)
        ax.set_xticks(x, routers, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
    bound = group["fleet_bound"].dropna()
    belady = group["belady_fleet_capacity"].dropna()
    if not bound.empty:
        axes[0].axhline(bound.iloc[0] * 100, color="k", ls="--", lw=1, label="bound (any router)")
    if not belady.empty:
        axes[0].axhline(belady.iloc[0] * 100, color="grey", ls=":", lw=1, label="Belady, fleet KV")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"{key['workload']} on {key['replicas']} replicas ({key['hardware']}, "
        f"{int(key['kv_capacity_tokens']):,} KV tokens each{_tier(key)}, {_load(key)}): routers",
        fontsize=10,
    )
    fig.tight_layout()
    return save(
        fig,
        inputs,
        "fleet",
        key["workload"],
        key["hardware"],
        f"x{key['replicas']}",
        f"kv{int(key['kv_capacity_tokens'])}",
        *([] if key["host_tier_tokens"] == "0" else [f"host{key['host_tier_tokens']}"]),
        key["load_mode"],
        f"rate{key['rate']}",
        f"c{key['concurrency']}",
    )


def _tier(key: dict) -> str:
    tokens = key["host_tier_tokens"]
    return "" if tokens == "0" else f" + a {int(tokens):,}-token host tier"


def _load(key: dict) -> str:
    rate = "" if key["rate"] == "-" else f" {key['rate']}/s"
    cap = "" if key["concurrency"] == "-" else f", concurrency {key['concurrency']}"
    return f"{key['load_mode']}{rate}{cap}"
