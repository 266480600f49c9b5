"""What a fleet run adds to its summary: per-replica hit rate and load, the imbalance, the fleet's
hit rate beside the single-cache bounds of the same stream (docs/fleet.md §4)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.fleet.approx_tree import pack
from harness.fleet.config import FleetConfig
from harness.fleet.mixed import per_design, replica_designs


def with_replica(table: pd.DataFrame, assignment: dict[str, int]) -> pd.DataFrame:
    """The request table with the replica that served each row (by its parent request)."""
    out = table.copy()
    out["replica"] = [assignment.get(p, -1) for p in out["parent_id"]]
    return out.astype({"replica": "int64"})


def block_hit_rate(table: pd.DataFrame, block: int) -> float | None:
    """Whole `block`-token blocks served from cache over blocks sent (a partial last block counts
    as a block): the block-weighted figure trace papers report (Dynamo's "cache efficiency")."""
    blocks = int(((table["prompt_tokens"] + block - 1) // block).sum())
    return int((table["cached_tokens"] // block).sum()) / blocks if blocks else None


def fleet_facts(
    table: pd.DataFrame,
    cfg: FleetConfig,
    trace_block: int | None = None,
    prompts: list | None = None,
    tiered: bool = False,
    stored: bool = False,
) -> dict[str, object]:
    """Per replica: requests, prompt and cached tokens (`tiered`: and the host tier's part of
    them; `stored`: and the storage tier's), hit rate; a mixed fleet: each replica's design, and the same figures per design
    (`fleet_per_design`); the load imbalance (max over mean requests, and of prompt tokens), the
    fleet hit rate (token-weighted, and over the trace's own blocks when the workload has them)."""
    per: list[dict[str, object]] = []
    designs = replica_designs(cfg)
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
        if tiered:  # absent without a tier: a tier-off fleet's summary is unchanged
            per[-1]["host_cached_tokens"] = int(rows["host_cached_tokens"].sum())
        if stored:  # likewise absent without a storage tier
            per[-1]["storage_cached_tokens"] = int(rows["storage_cached_tokens"].sum())
        if designs is not None:  # a mixed fleet only: an unmixed fleet's summary is unchanged
            per[-1]["design"] = designs[i]
    reqs = np.array([p["requests"] for p in per], float)
    toks = np.array([p["prompt_tokens"] for p in per], float)
    prompt_all = int(table["prompt_tokens"].sum())
    mixed = {"fleet_per_design": per_design(per)} if designs is not None else {}
    return {
        "fleet_replicas": cfg.replicas,
        "fleet_router": cfg.router,
        "fleet_hit_rate": int(table["cached_tokens"].sum()) / prompt_all if prompt_all else None,
        "fleet_hit_rate_blocks": block_hit_rate(table, trace_block) if trace_block else None,
        "ideal_hit_rate_blocks": (
            ideal_block_hit_rate(prompts, trace_block) if trace_block and prompts else None
        ),
        "fleet_load_imbalance": float(reqs.max() / reqs.mean()) if reqs.mean() else None,
        "fleet_token_imbalance": float(toks.max() / toks.mean()) if toks.mean() else None,
        "fleet_per_replica": per,
        **mixed,
    }


def ideal_block_hit_rate(prompts: list, block: int) -> float | None:
    """The unbounded ideal of the same stream in the same block terms: each prompt's leading
    blocks (partial last one included) already seen as a prefix chain, over all blocks."""
    seen: set[int] = set()  # 64-bit chained hashes: a collision among ~1e6 blocks is ~1e-8 likely
    hits = total = 0
    for ids in prompts:
        data = pack(ids)
        n = (len(ids) + block - 1) // block
        total += n
        parent, matched = 0, True
        for j in range(n):
            key = hash((parent, data[j * block * 4 : (j + 1) * block * 4]))
            if matched and key in seen:
                hits += 1
            else:
                matched = False
                seen.add(key)
            parent = key
    return hits / total if total else None
