"""What a fleet run adds to its summary: per-replica hit rate and load, the imbalance, the fleet's
hit rate beside the single-cache bounds of the same stream (docs/fleet.md §4)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.fleet.config import FleetConfig


def with_replica(table: pd.DataFrame, assignment: dict[str, int]) -> pd.DataFrame:
    """The request table with the replica that served each row (by its parent request)."""
    out = table.copy()
    out["replica"] = [assignment.get(p, -1) for p in out["parent_id"]]
    return out.astype({"replica": "int64"})


def fleet_facts(table: pd.DataFrame, cfg: FleetConfig) -> dict[str, object]:
    """Per replica: requests, prompt and cached tokens, hit rate; the load imbalance (max over
    mean requests, and of prompt tokens), the fleet hit rate."""
    per: list[dict[str, object]] = []
    for i in range(cfg.replicas):
        rows = table[table["replica"] == i]
        prompt = int(rows["prompt_tokens"].sum())
        cached = int(rows["cached_tokens"].sum())
        per.append(
            {
                "replica": i,
                "requests": len(rows),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "hit_rate": cached / prompt if prompt else None,
            }
        )
    reqs = np.array([p["requests"] for p in per], float)
    toks = np.array([p["prompt_tokens"] for p in per], float)
    prompt_all = int(table["prompt_tokens"].sum())
    return {
        "fleet_replicas": cfg.replicas,
        "fleet_router": cfg.router,
        "fleet_hit_rate": int(table["cached_tokens"].sum()) / prompt_all if prompt_all else None,
        "fleet_load_imbalance": float(reqs.max() / reqs.mean()) if reqs.mean() else None,
        "fleet_token_imbalance": float(toks.max() / toks.mean()) if toks.mean() else None,
        "fleet_per_replica": per,
    }
