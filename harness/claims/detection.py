"""Claim 7's wrong-K/V detector and its detection matrix.

The detector compares what the cache serves with what computing it gives: the K/V a request is
served for its cached prefix against the K/V a caching-off run of the same request computed for
those positions (harness/claims/kv_tap.py), relative, block by block. The rounding floor is that
difference between a caching-off run and the same run with prefills chunked (a prompt's tail
computed over K/V an earlier forward wrote, a cache hit's rounding path with no cache). The matrix
injects each realistic fault (harness/claims/fault.py) at several seeds and both designs, and
checks the tolerance catches each in every request it reached with no false positive.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from harness.claims.arms import ARMS
from harness.claims.experiment import claims_compose
from harness.claims.kv_tap import envelope, kv_diffs, score
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure as measure_run
from harness.run.pipeline import prepare

if TYPE_CHECKING:
    import torch

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


class Run(NamedTuple):
    """One real-model run: records and first-token logits by request id, the K/V each request
    was served for its cached prefix and computed for its prompt, and the requests served
    faulted K/V (None without a fault)."""

    records: dict
    logits: dict[str, torch.Tensor]
    served: dict[str, torch.Tensor]
    fresh: dict[str, torch.Tensor]
    faulted: set[str] | None


def run_kv(
    model: str,
    overrides: tuple[str, ...],
    fault: tuple[str, float] | None = None,
    ctx: Context | None = None,
    seed: int = 0,
) -> Run:
    """One run through the pipeline at `seed`; with `fault` (kind, scale), cached prefixes' K/V
    are faulted before the tap reads what they serve. `ctx` counts the run as evidence."""
    from engines.real_executor import RealExecutor  # imports torch: only when claim 7 runs
    from harness.claims.fault import CachedKVFault
    from harness.claims.kv_tap import KVTap

    composed = claims_compose([f"model={model}", *overrides, f"seed={seed}"])
    prepared = prepare(composed.cfg, ENGINE)
    executor = engine_of(prepared).executor
    if not isinstance(executor, RealExecutor):
        raise RuntimeError(f"claim 7 needs the real executor, got {type(executor).__name__}")
    executor.first_logits = {}
    injector = None if fault is None else CachedKVFault(executor, fault[0], fault[1], seed)
    tap = KVTap(executor)  # wraps the injector: reads the prefix as faulted
    measured = measure_run(composed.cfg, prepared)
    if measured.status != "ok":
        raise RuntimeError(f"claims run ({' '.join(overrides)}): {measured.error}")
    if ctx is not None:
        ctx.note(f"{FOLDER}/{' '.join(overrides)} fault={fault} seed={seed}", seed)
    return Run(
        {r.request_id: r for r in measured.items},
        executor.first_logits,
        tap.served,
        tap.fresh(),
        None if injector is None else injector.faulted,
    )


def max_diff(a: dict, b: dict, ids) -> list[float]:
    """Largest absolute first-token logit difference per request in `ids`."""
    return [float((a[r] - b[r]).abs().max()) for r in ids if r in a and r in b]


def floor_of(model: str, off_arm: tuple[str, ...], ctx, seed: int, chunk: int = CHUNK) -> dict:
    """The caching-off run and its rounding floors against itself chunked at `chunk` tokens: the
    K/V one per layer, K and V (`floor`) and the first-token logits one (`logit_floor`, beside)."""
    off = run_kv(model, off_arm, ctx=ctx, seed=seed)
    chunked = run_kv(
        model, (*off_arm, f"engine.max_num_batched_tokens={chunk}"), ctx=ctx, seed=seed
    )
    return {
        "off": off,
        "floor": envelope(kv_diffs(chunked.fresh, off.fresh, off.fresh)),
        "logit_floor": max(max_diff(chunked.logits, off.logits, off.logits), default=0.0),
    }


def matrix(model: str, base: tuple[str, ...], designs, seeds, ctx=None) -> dict:
    """Per design and seed: the floor, the off-against-itself differences at the second chunk
    size, caching on (no fault) against off, and each fault's per-request differences among the
    requests it reached. A seed where a fault reaches no request (the design reuses nothing, or
    only within one step) is rerun at the next unused seed (up to RETRIES times)."""
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
    # the floor: per layer, the largest off-against-itself difference of any cell, either chunk size
    return {"cells": cells, "floor": envelope([d for c in cells for d in (c["floor"], *c["self"])])}


def _cell(model: str, base: tuple[str, ...], design: str, seed: int, ctx) -> dict:
    off_arm = (*base, *ARMS[f"{design}-off"])
    calib = floor_of(model, off_arm, ctx, seed)
    fresh = calib["off"].fresh
    second = run_kv(
        model, (*off_arm, f"engine.max_num_batched_tokens={SECOND_CHUNK}"), ctx=ctx, seed=seed
    )
    on = run_kv(model, (*base, *ARMS[design]), ctx=ctx, seed=seed)
    faults = {}
    for name, fault in FAULTS.items():
        hurt = run_kv(model, (*base, *ARMS[design]), fault, ctx, seed)
        # the requests served faulted K/V: same-step hits (no K/V yet to fault) are not among them
        faults[name] = kv_diffs(hurt.served, fresh, sorted(hurt.faulted or ()))
    return {
        "design": design,
        "seed": seed,
        "floor": calib["floor"],
        "self": kv_diffs(second.fresh, fresh, fresh),
        "on": kv_diffs(on.served, fresh, on.served),
        "reused": sum(rec.cached_tokens > 0 for rec in on.records.values()),
        "faults": faults,
    }


def judge(found: dict, tolerance: torch.Tensor) -> list[dict]:
    """The detection matrix under one per-layer tolerance: per design, seed and fault, requests
    flagged of those it reached, and the smallest score (difference over tolerance, flagged above
    1); caching off against itself (prefills chunked at 48 tokens) and caching on without a fault
    against off, flagged and their largest score."""
    rows = []
    for c in found["cells"]:
        row = {"design": c["design"], "seed": c["seed"], "reused": c["reused"]}
        for key, diffs in (("off vs itself", c["self"]), ("on vs off", c["on"])):
            scores = [score(d, tolerance) for d in diffs]
            row[f"{key} flagged"] = sum(x > 1 for x in scores)
            row[f"{key} max score"] = max(scores, default=0.0)
        for name, diffs in c["faults"].items():
            scores = [score(d, tolerance) for d in diffs]
            row[name] = f"{sum(x > 1 for x in scores)}/{len(scores)}"
            row[f"{name} min score"] = min(scores, default=0.0)
        rows.append(row)
    return rows


def complete(rows: list[dict]) -> bool:
    """Every fault caught in every request it reached, some request reached in every cell, and
    no false positive."""
    return all(
        r["off vs itself flagged"] == 0
        and r["on vs off flagged"] == 0
        and all(_caught_all(r[name]) for name in FAULTS)
        for r in rows
    )


def _caught_all(cell: str) -> bool:
    caught, served = (int(x) for x in cell.split("/"))
    return served > 0 and caught == served


def table(rows: list[dict]) -> str:
    """The matrix as markdown (the claim's details and docs/claims.md)."""
    head = ["design", "seed", "reusing", *(f"{n} (flagged / served it)" for n in FAULTS)]
    head += ["off vs itself flagged", "on vs off flagged"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["design"], str(r["seed"]), str(r["reused"])]
        cells += [r[name] for name in FAULTS]
        cells += [str(r["off vs itself flagged"]), str(r["on vs off flagged"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
