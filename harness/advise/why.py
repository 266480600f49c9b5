"""Why the designs differ on this traffic: the hit-rate difference split into its causes, and the
ceilings an ideal cache reaches.

Causes, from the grid's 2 x 2 square (cache x scheduler) at page 16 plus page 1 under both
schedulers, each in the factorial's convention (harness/claims/effects.py: the main effect is the
mean of the two simple effects, the interaction half their difference):
  granularity        radix page 16 -> page 1
  tree vs hash       apc -> radix, both at 16 (the data structure alone)
  same-step sharing  apc's gain from vLLM's scheduler beyond radix's (the difference of the two
                     simple scheduler effects, i.e. twice the interaction): only vLLM's
                     allocate_slots makes a block computed in a step matchable in that same step
  scheduling order   SGLang's cache-aware (lpm) order against FCFS, radix page 1
  eviction           the hit rate lost at the user's capacity against one that holds everything
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.advise.grid import FIT, SGLANG, USER, VLLM, Cell, shipped
from harness.claims import keys
from harness.claims.arms import APC, RADIX
from harness.claims.effects import Effects, effects

RADIX16 = f"{RADIX}16"
SQUARE = {
    (APC, VLLM): Cell(APC, VLLM, 16).name,
    (APC, SGLANG): Cell(APC, SGLANG, 16).name,
    (RADIX16, VLLM): Cell(RADIX, VLLM, 16).name,
    (RADIX16, SGLANG): Cell(RADIX, SGLANG, 16).name,
    (RADIX, VLLM): Cell(RADIX, VLLM, 1).name,
    (RADIX, SGLANG): Cell(RADIX, SGLANG, 1).name,
}
LPM = Cell(RADIX, SGLANG, 1, policy="lpm").name


@dataclass(frozen=True)
class Causes:
    """The hit-rate causes under one arrival pattern (None where the grid lacks the cells)."""

    pattern: str
    shipped_gap: float  # radix (page 1, SGLang) - apc (block 16, vLLM)
    granularity: Effects
    tree: Effects
    same_step: float
    order: float | None
    eviction: dict[str, float]  # design -> hit rate lost at the user's capacity
    evictions: dict[str, int]  # design -> evicted blocks/pages at the user's capacity

    def lines(self) -> list[str]:
        out = [
            f"radix (page 1, SGLang) - apc (block 16, vLLM): {100 * self.shipped_gap:+.1f} points",
            f"granularity (radix page 16 -> 1): {self.granularity.text()}",
            f"tree vs hash at page 16 (apc -> radix): {self.tree.text()}",
            f"same-step sharing (apc's gain from vLLM's scheduler beyond radix's): "
            f"{100 * self.same_step:+.1f} points",
        ]
        if self.order is not None:
            out.append(
                f"scheduling order (SGLang lpm vs FCFS, radix page 1): {100 * self.order:+.1f} points"
            )
        if self.eviction:
            lost = ", ".join(
                f"{d} {100 * v:.1f} points ({self.evictions.get(d, 0)} evictions)"
                for d, v in self.eviction.items()
            )
            out.append(f"eviction (hit rate lost at your capacity vs the working set's): {lost}")
        return out


def _mean(runs: pd.DataFrame, cell: str, key: str = keys.HIT_RATE) -> float | None:
    found = pd.to_numeric(runs.loc[runs["cell"] == cell, key], errors="coerce").dropna()
    return float(found.mean()) if len(found) else None


def causes(runs: pd.DataFrame, pattern: str) -> Causes | None:
    at = runs[runs["pattern"] == pattern]
    user = at[at["capacity"] == USER]
    cells = {k: _mean(user, name) for k, name in SQUARE.items()}
    if any(v is None for v in cells.values()):
        return None
    hits: dict[tuple[str, str], float] = {k: v for k, v in cells.items() if v is not None}
    apc_sched = hits[APC, VLLM] - hits[APC, SGLANG]
    radix_sched = hits[RADIX16, VLLM] - hits[RADIX16, SGLANG]
    lpm, fcfs = _mean(user, LPM), hits[RADIX, SGLANG]
    eviction: dict[str, float] = {}
    evictions: dict[str, int] = {}
    for cell in shipped():
        fit = _mean(
            at[at["capacity"] == FIT],
            Cell(cell.cache, cell.scheduler, cell.block_size, capacity=FIT).name,
        )
        mine = _mean(user, cell.name)
        if fit is not None and mine is not None:
            eviction[cell.cache] = fit - mine
            evictions[cell.cache] = int(_mean(user, cell.name, keys.EVICTIONS) or 0)
    return Causes(
        pattern=pattern,
        shipped_gap=hits[RADIX, SGLANG] - hits[APC, VLLM],
        granularity=effects(hits, (RADIX16, RADIX), (VLLM, SGLANG)),
        tree=effects(hits, (APC, RADIX16), (VLLM, SGLANG)),
        same_step=apc_sched - radix_sched,
        order=None if lpm is None else lpm - fcfs,
        eviction=eviction,
        evictions=evictions,
    )


def main_cause(c: Causes) -> str:
    """The largest cause in magnitude, named for the reader."""
    found = {
        "radix's page-1 granularity": c.granularity.main,
        "the tree itself (at equal page size)": c.tree.main,
        "apc's same-step sharing (vLLM's scheduler hashes blocks as it allocates them)": c.same_step,
        "SGLang's cache-aware order": c.order or 0.0,
        "eviction at your capacity": max(c.eviction.values(), default=0.0),
    }
    name, value = max(found.items(), key=lambda kv: abs(kv[1]))
    return f"{name} ({100 * value:+.1f} points)"


@dataclass(frozen=True)
class Ceilings:
    ideal_page1: float  # unbounded cache, token granularity
    ideal_block16: float | None  # unbounded cache at apc's block 16
    belady: float | None  # Belady (optimal eviction) at the user's capacity, radix page 1
    lru: float | None  # LRU at the user's capacity (theoretical_hit_rate_capped), radix page 1


def ceilings(runs: pd.DataFrame) -> Ceilings:
    """From the shipped pairings' runs at the user's capacity (the ceilings ignore timing)."""
    apc, radix = shipped()
    user = runs[runs["capacity"] == USER]
    return Ceilings(
        ideal_page1=float(user["ideal_hit_rate_token"].max()),
        ideal_block16=_mean(user, apc.name, "ideal_hit_rate"),
        belady=_mean(user, radix.name, "belady_hit_rate"),
        lru=_mean(user, radix.name, "theoretical_hit_rate_capped"),
    )
