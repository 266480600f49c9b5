"""Claim 7's detector validated: a cached prefix's K/V perturbed on purpose must be caught.

`CachedKVFault` wraps the real executor's step: the first time a sequence is scheduled with a
cached prefix (its first chunk starts past position 0), every slot of that prefix gets, in every
layer, K and V plus `scale` x the layer's K/V RMS x unit Gaussian noise (a seeded generator), once
per slot, so a block reused by several requests stays perturbed by the same amount. That is what
a cache serving wrong K/V looks like to the model; the claim's tolerance must flag it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class CachedKVFault:
    """Perturbs the K/V of cached prefixes as they are first reused (see the module docstring)."""

    def __init__(self, executor: Any, scale: float, seed: int = 0) -> None:
        self.executor = executor
        self.scale = scale
        self.generator = torch.Generator().manual_seed(seed)
        self.seen: set[str] = set()
        self.perturbed: set[int] = set()
        self.num_slots = 0
        inner: Callable[..., dict[str, int]] = executor.execute
        self.inner = inner
        executor.execute = self.execute  # the engine calls the instance attribute

    def execute(self, plan: Any) -> dict[str, int]:
        for it in plan.scheduled:
            if it.seq.seq_id in self.seen:
                continue
            self.seen.add(it.seq.seq_id)
            if it.start > 0:
                self._perturb(self._slots(it.seq, it.start))
        return self.inner(plan)

    def _slots(self, seq: Any, num_cached: int) -> list[int]:
        table = self.executor.cache.block_table(seq)
        size = self.executor.cache.block_size
        slots = (table[p // size] * size + p % size for p in range(num_cached))
        return [s for s in slots if s not in self.perturbed]

    @torch.inference_mode()
    def _perturb(self, slots: list[int]) -> None:
        if not slots:
            return
        self.perturbed.update(slots)
        self.num_slots += len(slots)
        pool = self.executor.kv_pool
        for layer in range(pool.num_layers):
            for cache in pool.layer(layer):
                flat = cache.view(-1, *cache.shape[2:])  # [slots, kv heads, head dim]
                rms = float(flat.float().pow(2).mean().sqrt())
                index = torch.tensor(slots, dtype=torch.int64, device=flat.device)
                noise = torch.randn(
                    (len(slots), *flat.shape[1:]), generator=self.generator, dtype=torch.float32
                )
                flat[index] += (self.scale * rms * noise).to(flat.dtype).to(flat.device)
