"""The tier table (docs/tiers.md §8.3): per run of a tier sweep, the hits each tier served, the
time and the bytes the host link carried, one row per run.

A run belongs to the table when its config names a host tier size (`engine.host_tier.tokens`, 0
for the tier-off arm of the same sweep). Shares are of the prompt tokens; bytes are both
directions' totals of the run; "step time added" is the part of the loads no compute hid
(docs/tiers.md §7.1). `markdown_rows` renders the rows as the docs print them, so a test can
rerun a suite and compare it with the committed table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engines.cache import DESIGNS

TIER_TOKENS = "config.engine.host_tier.tokens"
INDEXED = "config.fleet.index_host_tier"  # a fleet's precise router saw the host tiers
COLUMNS = [
    "run",
    "hit %",
    "device %",
    "host %",
    "mean TTFT s",
    "output tok/s",
    "loaded GB",
    "load link s",
    "step time added s",
    "stored GB",
]


def tier_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per ok run that has a host tier axis, in run-folder order."""
    if runs.empty or TIER_TOKENS not in runs:
        return pd.DataFrame(columns=COLUMNS)
    ok = runs["status"] == "ok" if "status" in runs else pd.Series(True, index=runs.index)
    picked = runs[ok & runs[TIER_TOKENS].notna()].sort_values("run_dir")
    return pd.DataFrame([_row(r) for _, r in picked.iterrows()], columns=COLUMNS)


def _row(r: pd.Series) -> list[object]:
    engine = str(r.get("config.engine.cache") or r.get("backend"))
    tokens = int(r[TIER_TOKENS])
    label = f"{engine} + {_tier_label(engine)}" if tokens else f"{engine}, no tier"
    if router_sees_tiers(r):
        label += ", router sees it"
    return [
        label,
        100 * _num(r, "hit_rate"),
        100 * _num(r, "device_hit_rate", "hit_rate"),
        100 * _num(r, "host_hit_rate"),
        _num(r, "mean_ttft_ms") / 1000,
        _num(r, "output_throughput"),
        _num(r, "host_link.load_bytes") / 1e9,
        _num(r, "host_link.load_s"),
        _num(r, "host_link.load_stall_s"),
        _num(r, "host_link.store_bytes") / 1e9,
    ]


def router_sees_tiers(r: pd.Series) -> bool:
    """Whether the run's fleet router indexed the replicas' host tiers (fleet.index_host_tier;
    a loaded column may hold numpy booleans, or NaN for runs before the key)."""
    value = r.get(INDEXED)
    return isinstance(value, (bool, np.bool_)) and bool(value)


def _tier_label(engine: str) -> str:
    """What the design's upstream calls its host tier (docs/tiers.md §2, §3)."""
    return DESIGNS.get(engine).tier_label if engine in DESIGNS.names() else "host tier"


def _num(r: pd.Series, key: str, fallback: str | None = None) -> float:
    """The run's value, the fallback's where it has none, 0 where neither (a tier-off run
    carries no host fields)."""
    for name in (key, fallback):
        if name is not None and name in r and pd.notna(r[name]):
            return float(r[name])
    return 0.0


DIGITS = {"mean TTFT s": 2, "load link s": 2, "step time added s": 2}


def markdown_rows(table: pd.DataFrame) -> list[str]:
    """The rows as docs/tiers.md prints them: shares, throughput and GB to one decimal, seconds to
    two."""
    lines = []
    for _, row in table.iterrows():
        cells = [str(row["run"])]
        cells += [f"{row[c]:.{DIGITS.get(c, 1)}f}" for c in COLUMNS[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
