"""The fleet's decomposition (docs/fleet.md §4): per fleet run, its hit rate beside the
single-cache bounds of the same stream, what its router loses against the `ideal` router of the
same fleet, and what the cache design changes under the same router (apc vs radix fleets).

One row per fleet run (fleet.replicas > 1), keyed by workload, hardware, replicas, engine and
router; `router_loss` needs an `ideal` run of the same key minus the router, `design_delta` the
other design's run of the same key minus the engine.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report.decomposition import CACHE_A, CACHE_B

KEY = ["workload", "hardware", "replicas", "kv_capacity_tokens"]
COLUMNS = [
    *KEY,
    "engine",
    "router",
    "n_runs",
    "fleet_hit_rate",
    "ideal_unbounded",
    "belady_fleet_capacity",
    "router_loss",
    "design_delta",
    "load_imbalance",
    "p50_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "p90_tpot_ms",
    "total_token_throughput",
]


def fleet_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The ok runs of a fleet (more than one replica), with `replicas` and `router` columns."""
    if runs.empty or "config.fleet.replicas" not in runs:
        return runs.iloc[0:0]
    replicas = pd.to_numeric(runs["config.fleet.replicas"], errors="coerce").fillna(1)
    ok = runs["ok"] if "ok" in runs else pd.Series(True, index=runs.index)
    out = runs[(replicas > 1) & ok.astype(bool)].copy()
    out["replicas"] = replicas[out.index].astype(int)
    out["router"] = out["config.fleet.router"].astype(str)
    if "hardware" not in out:
        out["hardware"] = None
    out["hardware"] = out["hardware"].fillna("-")
    return out


def _unbounded(row: pd.Series) -> float:
    """The unbounded ideal of the stream: at the engine's granularity, else the coarsest
    granularity computed (whole traces compute only 512)."""
    if pd.notna(row.get("ideal_hit_rate")):
        return float(row["ideal_hit_rate"])
    cols = [c for c in row.index if c.startswith("theoretical_hit_rate_by_granularity.")]
    vals = [(int(c.rsplit(".", 1)[1]), row[c]) for c in cols if pd.notna(row[c])]
    return float(sorted(vals)[0][1]) if vals else np.nan


def fleet_table(runs: pd.DataFrame) -> pd.DataFrame:
    df = fleet_runs(runs)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    df["ideal_unbounded"] = df.apply(_unbounded, axis=1)
    df["belady_fleet_capacity"] = pd.to_numeric(df.get("belady_hit_rate"), errors="coerce")
    metrics = {
        "fleet_hit_rate": "fleet_hit_rate",
        "ideal_unbounded": "ideal_unbounded",
        "belady_fleet_capacity": "belady_fleet_capacity",
        "load_imbalance": "fleet_load_imbalance",
        "p50_ttft_ms": "p50_ttft_ms",
        "p90_ttft_ms": "p90_ttft_ms",
        "p99_ttft_ms": "p99_ttft_ms",
        "p90_tpot_ms": "p90_tpot_ms",
        "total_token_throughput": "total_token_throughput",
    }
    for col in metrics.values():
        df[col] = pd.to_numeric(df.get(col), errors="coerce")
    grouped = df.groupby([*KEY, "engine", "router"], dropna=False)
    table = grouped.agg(**{k: (v, "mean") for k, v in metrics.items()}).reset_index()
    table["n_runs"] = grouped.size().to_numpy()
    ideal = table[table["router"] == "ideal"].set_index([*KEY, "engine"])["fleet_hit_rate"]
    table["router_loss"] = [
        ideal.get(tuple(r[[*KEY, "engine"]]), np.nan) - r["fleet_hit_rate"]
        for _, r in table.iterrows()
    ]
    by_design = table.set_index([*KEY, "router", "engine"])["fleet_hit_rate"]
    table["design_delta"] = [
        r["fleet_hit_rate"] - by_design.get((*r[KEY], r["router"], _other(r["engine"])), np.nan)
        for _, r in table.iterrows()
    ]
    return table[COLUMNS].sort_values([*KEY, "engine", "router"]).reset_index(drop=True)


def _other(engine: str) -> str:
    """The design a fleet of `engine` is compared with: the report's 2x2 pair (decomposition)."""
    return {CACHE_A: CACHE_B, CACHE_B: CACHE_A}.get(engine, "")
