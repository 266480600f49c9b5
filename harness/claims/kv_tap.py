"""Claim 7's wrong-K/V statistic: what the cache serves against what a fresh prefill computes.

`KVTap` wraps the real executor's step and keeps, per request, the K/V its prompt positions were
computed with (`fresh`) and, the first time it is scheduled past a cached prefix, the K/V the cache
serves for that prefix (`served`), both read from the pool after the step. `kv_diff` compares a
run's served prefix with a caching-off run's fresh K/V of the same request, block by block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

BLOCK = 16  # positions per compared block: one stale block among many is not averaged away


class KVTap:
    """Keeps served and freshly computed prompt K/V per request (see the module docstring)."""

    def __init__(self, executor: Any) -> None:
        self.executor = executor
        self.served: dict[str, torch.Tensor] = {}  # [layers, K/V, positions, heads, dim] float32
        self.chunks: dict[str, list[torch.Tensor]] = {}
        self.seen: set[str] = set()
        inner: Callable[..., dict[str, int]] = executor.execute
        self.inner = inner
        executor.execute = self.execute  # the engine calls the instance attribute

    def execute(self, plan: Any) -> dict[str, int]:
        out = self.inner(plan)
        # after the step: a same-step hit's prefix is written by now, and served slots are never
        # rewritten while the request holds them
        for it in plan.scheduled:
            seq = it.seq
            if seq.seq_id not in self.seen:
                self.seen.add(seq.seq_id)
                if it.start > 0:
                    self.served[seq.seq_id] = self._read(seq, 0, it.start)
            end = min(it.end, seq.num_prompt_tokens)
            if it.start < end:
                self.chunks.setdefault(seq.seq_id, []).append(self._read(seq, it.start, end))
        return out

    def fresh(self) -> dict[str, torch.Tensor]:
        """Each request's prompt K/V as its own steps computed them (a caching-off run: all of it)."""
        return {rid: torch.cat(parts, dim=2) for rid, parts in self.chunks.items()}

    @torch.inference_mode()
    def _read(self, seq: Any, begin: int, end: int) -> torch.Tensor:
        table = self.executor.cache.block_table(seq)
        size = self.executor.cache.block_size
        slots = torch.tensor([table[p // size] * size + p % size for p in range(begin, end)])
        pool = self.executor.kv_pool
        layers = [torch.stack(pool.read_tokens(i, slots)) for i in range(pool.num_layers)]
        return torch.stack(layers).float().cpu()


def kv_diff(served: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """Per layer, K and V (`[layers, 2]`): the largest relative difference (Frobenius norm of the
    difference over the fresh K/V's) of any BLOCK positions of the served prefix. Per layer,
    because rounding differences grow with depth (layer 0's K/V depend only on the token and its
    position) while a wrong K/V is wrong in every layer."""
    fresh = fresh[:, :, : served.shape[2]]
    worst = torch.zeros(served.shape[:2])
    for begin in range(0, served.shape[2], BLOCK):
        a, b = served[:, :, begin : begin + BLOCK], fresh[:, :, begin : begin + BLOCK]
        num = (a - b).pow(2).sum(dim=(2, 3, 4)).sqrt()
        den = b.pow(2).sum(dim=(2, 3, 4)).sqrt().clamp_min(1e-30)
        worst = torch.maximum(worst, num / den)
    return worst


def kv_diffs(
    served: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor], ids
) -> list[torch.Tensor]:
    """kv_diff of each request in `ids` served a prefix and computed fresh."""
    return [kv_diff(served[r], fresh[r]) for r in ids if r in served and r in fresh]


def envelope(diffs: list[torch.Tensor]) -> torch.Tensor | None:
    """The per-layer maximum of several kv_diff results (None for none)."""
    return torch.stack(diffs).amax(dim=0) if diffs else None


def score(diff: torch.Tensor, tolerance: torch.Tensor) -> float:
    """How far a request's K/V is off, in tolerances: the largest layer's difference over that
    layer's tolerance (above 1: flagged)."""
    return float((diff / tolerance).max())
