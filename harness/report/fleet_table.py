"""The fleet's decomposition (docs/fleet.md §4): per fleet run, its hit rate beside the bound no
router can beat and the single-cache references of the same stream, what its router loses against
that bound, and what the cache design changes under the same router (apc vs radix fleets).

One row per fleet configuration, keyed by workload, hardware, replicas, capacity, the host tier
per replica (tier-off and tier-on runs are never averaged), the load (mode,
rate, concurrency: a burst and a Poisson run are never averaged), engine and router;
`router_loss` is the bound minus the hit rate, per run, then averaged (never negative: the bound
holds for every run), `design_delta` the other design's row of the same key minus this one's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report.decomposition import CACHE_A, CACHE_B
from harness.report.tier_table import TIER_TOKENS, router_sees_tiers

KEY = [
    "workload",
    "hardware",
    "replicas",
    "kv_capacity_tokens",
    "host_tier_tokens",
    "load_mode",
    "rate",
    "concurrency",
]
LOAD = {
    "load_mode": "config.load.mode",
    "rate": "config.load.rate",
    "concurrency": "config.load.max_concurrency",
}
COLUMNS = [
    *KEY,
    "engine",
    "router",
    "n_runs",
    "fleet_hit_rate",
    "fleet_bound",
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
    out["router"] = [_router(row) for _, row in out.iterrows()]
    if "config.fleet.designs" in out:  # a mixed fleet is its own engine: `mixed:apc+radix`
        out["engine"] = [_engine(row) for _, row in out.iterrows()]
    if "hardware" not in out:
        out["hardware"] = None
    out["hardware"] = out["hardware"].fillna("-")
    tier = out[TIER_TOKENS] if TIER_TOKENS in out else pd.Series(0, index=out.index)
    out["host_tier_tokens"] = [_label(v) for v in tier.fillna(0)]  # runs before tiers: none
    for col, source in LOAD.items():  # "-": not set (no rate in a burst, no concurrency cap)
        values = out[source] if source in out else pd.Series(None, index=out.index, dtype=object)
        out[col] = [_label(v) for v in values]
    return out


def _router(row: pd.Series) -> str:
    """The policy, behind the real router that ran it (`sglang-router/cache_aware`) when one did,
    and marked `+host` when it indexed the replicas' host tiers (fleet.index_host_tier): such
    runs are never averaged with the in-process fleet's or the device-only router's."""
    real = row.get("config.fleet.real")
    policy = str(row["config.fleet.router"])
    if router_sees_tiers(row):
        policy += "+host"
    return f"{real}/{policy}" if isinstance(real, str) and real else policy


def _engine(row: pd.Series) -> str:
    """The run's engine, or a mixed fleet's designs in their cycle order (fleet.designs)."""
    designs = row.get("config.fleet.designs")
    if isinstance(designs, (list, tuple, np.ndarray)) and len(designs):
        return "mixed:" + "+".join(str(d) for d in designs)
    return str(row.get("engine"))


def _label(value: object) -> str:
    """A load field as a key: a number without a trailing .0, "-" when unset."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


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
    df["belady_fleet_capacity"] = _numbers(df, "belady_hit_rate")
    df["fleet_bound"] = _numbers(df, "fleet_bound_hit_rate")  # absent in runs before the bound
    df["fleet_hit_rate"] = _numbers(df, "fleet_hit_rate")
    df["router_loss"] = df["fleet_bound"] - df["fleet_hit_rate"]
    metrics = {
        "fleet_hit_rate": "fleet_hit_rate",
        "fleet_bound": "fleet_bound",
        "router_loss": "router_loss",
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
        df[col] = _numbers(df, col)
    grouped = df.groupby([*KEY, "engine", "router"], dropna=False)
    table = grouped.agg(**{k: (v, "mean") for k, v in metrics.items()}).reset_index()
    table["n_runs"] = grouped.size().to_numpy()
    by_design = table.set_index([*KEY, "router", "engine"])["fleet_hit_rate"]
    table["design_delta"] = [
        r["fleet_hit_rate"] - by_design.get((*r[KEY], r["router"], _other(r["engine"])), np.nan)
        for _, r in table.iterrows()
    ]
    return table[COLUMNS].sort_values([*KEY, "engine", "router"]).reset_index(drop=True)


def _numbers(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[col], errors="coerce")


def _other(engine: str) -> str:
    """The design a fleet of `engine` is compared with: the report's 2x2 pair (decomposition)."""
    return {CACHE_A: CACHE_B, CACHE_B: CACHE_A}.get(engine, "")
