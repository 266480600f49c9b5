"""Claim 7's wrong-K/V detector and its detection matrix.

A run here keeps each request's first-token logits (the real executor), optionally with a fault
injected into the cached prefixes' K/V (harness/claims/fault.py). The rounding floor is the
largest first-token logit difference between a caching-off run and the same run with prefills
chunked (a prompt's tail computed over K/V an earlier forward wrote: a cache hit's rounding path
with no cache); the matrix runs every fault at several seeds and designs, so the tolerance is derived from the
floors (the largest caching-off-against-itself difference, at two chunk sizes, every seed and
design: never flagged on the paths sampled, by construction) and checked against the faults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.claims.arms import ARMS
from harness.run.compose import compose
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure as measure_run
from harness.run.pipeline import prepare

if TYPE_CHECKING:
    from harness.claims.experiment import Context

FOLDER = "7-outputs"
CHUNK, SECOND_CHUNK = 32, 48  # two rounding paths of caching off against itself
# The realistic faults: (kind, relative scale) for CachedKVFault
FAULTS = {
    "off-by-one position": ("shift", 0.0),
    "stale block": ("stale", 0.0),
    "1% noise": ("noise", 0.01),
    "10% noise": ("noise", 0.1),
}
RETRIES = 3  # a seed where a fault reaches no request is replaced by the next unused seed


def run_logits(
    model: str,
    overrides: tuple[str, ...],
    fault: tuple[str, float] | None = None,
    ctx: Context | None = None,
    seed: int = 0,
) -> tuple[dict, dict, set[str] | None]:
    """(records by id, first-token logits by id, ids of the requests served faulted K/V or None
    without a fault) of one run through the pipeline at `seed`; with `fault` (kind, scale),
    cached prefixes' K/V are faulted. `ctx` counts the run as evidence."""
    from engines.real_executor import RealExecutor  # imports torch: only when claim 7 runs
    from harness.claims.fault import CachedKVFault

    composed = compose([f"model={model}", *overrides, f"seed={seed}"], job_name="claims")
    prepared = prepare(composed.cfg, ENGINE)
    executor = engine_of(prepared).executor
    if not isinstance(executor, RealExecutor):
        raise RuntimeError(f"claim 7 needs the real executor, got {type(executor).__name__}")
    executor.first_logits = {}
    injector = None if fault is None else CachedKVFault(executor, fault[0], fault[1], seed)
    measured = measure_run(composed.cfg, prepared)
    if measured.status != "ok":
        raise RuntimeError(f"claims run ({' '.join(overrides)}): {measured.error}")
    if ctx is not None:
        ctx.note(f"{FOLDER}/{' '.join(overrides)} fault={fault} seed={seed}", seed)
    faulted = None if injector is None else injector.faulted
    return {r.request_id: r for r in measured.items}, executor.first_logits, faulted


def max_diff(a: dict, b: dict, ids) -> list[float]:
    return [float((a[r] - b[r]).abs().max()) for r in ids if r in a and r in b]


def floor_of(model: str, off_arm: tuple[str, ...], ctx, seed: int, chunk: int = CHUNK) -> dict:
    """The caching-off run and its rounding floor against itself chunked at `chunk` tokens."""
    off, off_logits, _ = run_logits(model, off_arm, ctx=ctx, seed=seed)
    over = (*off_arm, f"engine.max_num_batched_tokens={chunk}")
    _, chunked, _ = run_logits(model, over, ctx=ctx, seed=seed)
    diffs = max_diff(chunked, off_logits, off_logits)
    scale = max(float(t.abs().max()) for t in off_logits.values())
    return {"off": off, "logits": off_logits, "floor": max(diffs, default=0.0), "scale": scale}


def matrix(model: str, base: tuple[str, ...], designs, seeds, ctx=None) -> dict:
    """Per design and seed: the floor, the off-against-itself differences at the second chunk size and each
    fault's per-request differences among the requests it reached. A seed where a fault reaches
    no request (the design reuses nothing, or only within one step) is rerun at the next unused
    seed (up to RETRIES times)."""
    cells = []
    for design in designs:
        spare = iter(range(max(seeds) + 1, max(seeds) + 1 + RETRIES * len(seeds)))
        for seed in seeds:
            cell = _cell(model, base, design, seed, ctx)
            for _ in range(RETRIES):
                if all(cell["faults"].values()):  # every fault reached a request
                    break
                cell = _cell(model, base, design, next(spare), ctx)
            cells.append(cell)
    # the floor: the largest off-against-itself difference of any cell, at either chunk size
    return {"cells": cells, "floor": max(max(c["floor"], *c["self"]) for c in cells)}


def _cell(model: str, base: tuple[str, ...], design: str, seed: int, ctx) -> dict:
    off_arm = (*base, *ARMS[f"{design}-off"])
    calib = floor_of(model, off_arm, ctx, seed)
    _, second, _ = run_logits(
        model, (*off_arm, f"engine.max_num_batched_tokens={SECOND_CHUNK}"), ctx=ctx, seed=seed
    )
    faults, reused = {}, 0
    for name, fault in FAULTS.items():
        on, on_logits, faulted = run_logits(model, (*base, *ARMS[design]), fault, ctx, seed)
        reused = sum(rec.cached_tokens > 0 for rec in on.values())
        # the requests served faulted K/V: same-step hits (no K/V yet to fault) are not among them
        hit = sorted(faulted or ())
        faults[name] = max_diff(on_logits, calib["logits"], hit)
    return {
        "design": design,
        "seed": seed,
        "floor": calib["floor"],
        "scale": calib["scale"],
        "self": max_diff(second, calib["logits"], calib["logits"]),
        "reused": reused,
        "faults": faults,
    }


def judge(found: dict, tolerance: float) -> list[dict]:
    """The detection matrix under one tolerance: per design, seed and fault, requests flagged
    of those reusing; and caching off against itself (prefills chunked at 48 tokens) flagged."""
    rows = []
    for c in found["cells"]:
        row = {"design": c["design"], "seed": c["seed"], "reused": c["reused"]}
        row["off vs itself flagged"] = sum(d > tolerance for d in c["self"])
        for name, diffs in c["faults"].items():
            row[name] = f"{sum(d > tolerance for d in diffs)}/{len(diffs)}"
            row[f"{name} min diff"] = min(diffs, default=0.0)
        rows.append(row)
    return rows


def complete(rows: list[dict]) -> bool:
    """Every fault caught in every request it reached, some request reached in every cell, and
    no false positive."""
    return all(
        r["off vs itself flagged"] == 0 and all(_caught_all(r[name]) for name in FAULTS)
        for r in rows
    )


def _caught_all(cell: str) -> bool:
    caught, served = (int(x) for x in cell.split("/"))
    return served > 0 and caught == served


def table(rows: list[dict]) -> str:
    """The matrix as markdown (the claim's details and docs/claims.md)."""
    head = ["design", "seed", "reusing", *(f"{n} (flagged / served it)" for n in FAULTS)]
    head.append("off vs itself flagged")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["design"], str(r["seed"]), str(r["reused"])]
        cells += [r[name] for name in FAULTS] + [str(r["off vs itself flagged"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
