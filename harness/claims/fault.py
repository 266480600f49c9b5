"""Claim 7's detector validated: a cached prefix served with wrong K/V on purpose must be caught.

`CachedKVFault` wraps the real executor's step: the first time a sequence is scheduled with a
cached prefix (its first chunk starts past position 0), every slot of that prefix gets, in every
layer, one realistic fault (`KINDS`): `noise` adds `scale` x the RMS of the faulted slots' K/V (per
layer, K and V apart) x unit Gaussian noise (seeded); `shift` serves each position the K/V of the position before it (an off-by-one in
the slot mapping); `stale` serves K/V another request wrote at other positions (a block the cache
should have dropped). Each slot is faulted once, so a block reused by several requests stays
wrong by the same amount. That is what a cache serving wrong K/V looks like to the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

KINDS = ("noise", "shift", "stale")


class CachedKVFault:
    """Faults the K/V of cached prefixes as they are first reused (see the module docstring)."""

    def __init__(self, executor: Any, kind: str, scale: float = 0.0, seed: int = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; valid: {', '.join(KINDS)}")
        self.executor = executor
        self.kind, self.scale = kind, scale
        self.generator = torch.Generator().manual_seed(seed)
        self.seen: set[str] = set()
        self.perturbed: set[int] = set()
        self.written: dict[str, list[int]] = {}  # slots each sequence computed itself
        self.done: set[int] = set()  # slots computed in an earlier step (their K/V exists)
        # Requests served faulted K/V: their cached prefix existed before their step. A request
        # that hits blocks computed in its own step (vLLM's same-step sharing) reads K/V that the
        # step writes after any injection, so no fault can reach it; it is not counted.
        self.faulted: set[str] = set()
        self.num_slots = 0
        inner: Callable[..., dict[str, int]] = executor.execute
        self.inner = inner
        executor.execute = self.execute  # the engine calls the instance attribute

    def execute(self, plan: Any) -> dict[str, int]:
        for it in plan.scheduled:
            if it.seq.seq_id not in self.seen:
                self.seen.add(it.seq.seq_id)
                if it.start > 0:
                    cached = self._slots(it.seq, 0, it.start)
                    if all(s in self.done for s in cached):
                        self.faulted.add(it.seq.seq_id)
                    self._fault(it.seq.seq_id, cached)
        out = self.inner(plan)
        for it in plan.scheduled:  # after the step: these slots now hold this sequence's K/V
            computed = self._slots(it.seq, it.start, it.end)
            self.written.setdefault(it.seq.seq_id, []).extend(computed)
            self.done.update(computed)
        return out

    def _slots(self, seq: Any, begin: int, end: int) -> list[int]:
        table = self.executor.cache.block_table(seq)
        size = self.executor.cache.block_size
        return [table[p // size] * size + p % size for p in range(begin, end)]

    def _donor(self, seq_id: str, slots: list[int]) -> list[int] | None:
        """Slots another request wrote past its own cached prefix, none of them in `slots`."""
        mine = set(slots)
        for other, written in reversed(list(self.written.items())):
            donor = [s for s in written if s not in mine]
            if other != seq_id and donor:
                return donor
        return None

    @torch.inference_mode()
    def _fault(self, seq_id: str, slots: list[int]) -> None:
        if self.kind == "shift":  # position p reads p - 1's K/V; position 0 has none before it
            targets, sources = slots[1:], slots[:-1]
        elif self.kind == "stale":
            donor = self._donor(seq_id, slots)
            if donor is None:
                return
            targets, sources = slots, [donor[i % len(donor)] for i in range(len(slots))]
        else:
            targets, sources = slots, []
        pairs = list(zip(targets, sources)) if sources else [(t, t) for t in targets]
        pairs = [(t, s) for t, s in pairs if t not in self.perturbed]  # each slot faulted once
        if not pairs:
            return
        self.perturbed.update(t for t, _ in pairs)
        self.num_slots += len(pairs)
        pool = self.executor.kv_pool
        to = torch.tensor([t for t, _ in pairs], dtype=torch.int64)
        source = torch.tensor([s for _, s in pairs], dtype=torch.int64)
        for layer in range(pool.num_layers):
            for cache in pool.layer(layer):
                flat = cache.view(-1, *cache.shape[2:])  # [slots, kv heads, head dim]
                index, src = to.to(flat.device), source.to(flat.device)
                if self.kind == "noise":  # relative to the K/V it perturbs, not the whole pool's
                    rms = float(flat[index].float().pow(2).mean().sqrt())
                    noise = torch.randn(
                        (len(pairs), *flat.shape[1:]), generator=self.generator, dtype=torch.float32
                    )
                    flat[index] += (self.scale * rms * noise).to(flat.dtype).to(flat.device)
                else:  # read all sources before writing: a shift's targets are its sources
                    flat[index] = flat[src].clone()
