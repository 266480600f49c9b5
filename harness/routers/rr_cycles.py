"""The round-robin cycles a router may still be in, given the waves it has routed.

A candidate is the router's next n slots from its current position: an (order, position) pair
written out. The n rotations of one order at the n positions give the same futures as one
another's, so the n! * n pairs are n! distinct candidates (40,320 at 8 workers), held as one
array and pruned wave by wave. A wave of w requests takes the next w slots in an arrival order
we do not see (sglang-router 0.3.2 `policies/round_robin.rs`: one shared counter, taken once
per request), so it tells only the multiset of their workers: w // n of every worker, plus the
set of the first w mod n slots. A wave no candidate explains (the router's position moved
without us, e.g. a turn spent elsewhere) keeps the orders still held at any position, and failing
that starts again from every order.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Cycles:
    n: int
    rows: np.ndarray  # (candidates, n): each candidate's workers for the next n slots

    @classmethod
    def every(cls, n: int) -> Cycles:
        perms = list(itertools.permutations(range(n)))
        return cls(n, np.array(perms, dtype=np.int64).reshape(len(perms), n))

    @classmethod
    def known(cls, order: Sequence[int]) -> Cycles:
        """One order, its next slot assumed to be the order's first."""
        return cls(len(order), np.array([list(order)], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.rows)

    def window(self, start: int, width: int) -> np.ndarray:
        """Per candidate, the set of the workers of the slots start .. start + width beyond whole
        turns of the cycle (a bitmask): with width, it fixes the wave's multiset."""
        keys = np.zeros(len(self.rows), dtype=np.int64)
        for j in range(width % self.n):
            keys |= np.left_shift(1, self.rows[:, (start + j) % self.n])
        return keys

    def agree(self, width: int, start: int = 0) -> bool:
        """Whether every candidate gives the same multiset of workers to those slots."""
        keys = self.window(start, width)
        return bool((keys == keys[0]).all()) if len(keys) else False

    def settled(self, widths: Sequence[int]) -> bool:
        """Whether every candidate agrees on every wave of these widths to come (from any
        position a run of them can reach): the order learned up to what such waves can tell."""
        starts = range(self.n) if len(set(widths)) > 1 else None
        for w in widths:
            for s in starts or {(k * w) % self.n for k in range(self.n)}:
                if not self.agree(w, s):
                    return False
        return True

    def after(self, actuals: Sequence[int]) -> tuple[Cycles, bool]:
        """The candidates that explain a wave's workers, moved past it; False: none did (the
        position was lost: the orders held are kept at any position, else every order)."""
        mask = observed(self.n, actuals)
        if mask is not None:
            kept = self.rows[self.window(0, len(actuals)) == mask]
            if len(kept):
                return self._moved(kept, len(actuals)), True
            rotated = np.unique(
                np.concatenate([np.roll(self.rows, -s, 1) for s in range(self.n)]), axis=0
            )
            every = Cycles(self.n, rotated)
            kept = rotated[every.window(0, len(actuals)) == mask]
            if not len(kept):
                fresh = Cycles.every(self.n)
                kept = fresh.rows[fresh.window(0, len(actuals)) == mask]
            return self._moved(kept, len(actuals)), False
        return Cycles.every(self.n), False

    def _moved(self, rows: np.ndarray, width: int) -> Cycles:
        return Cycles(self.n, np.roll(rows, -(width % self.n), 1))

    def first(self) -> list[int]:
        """The lowest candidate in lexicographic order: the guess while candidates disagree
        (one at a time, the lowest worker not seen yet)."""
        best = self.rows[np.lexsort(self.rows.T[::-1])[0]]
        return [int(x) for x in best]

    def common_prefix(self, anchor: int) -> list[int]:
        """The cycle written from worker `anchor`, as far as every candidate agrees."""
        at = np.argmax(self.rows == anchor, axis=1)
        cols = (at[:, None] + np.arange(self.n)[None, :]) % self.n
        written = np.take_along_axis(self.rows, cols, axis=1)
        out: list[int] = []
        for j in range(self.n):
            if not (written[:, j] == written[0, j]).all():
                break
            out.append(int(written[0, j]))
        return out

    def column(self, slot: int) -> int | None:
        """The worker every candidate puts at this slot (from the current position), if one."""
        col = self.rows[:, slot % self.n]
        return int(col[0]) if len(col) and (col == col[0]).all() else None


def observed(n: int, actuals: Sequence[int]) -> int | None:
    """A wave's workers as `Cycles.window` keys them; None when no round robin over n workers
    takes them (a worker more than once beyond whole turns, or fewer than whole turns)."""
    turns, rest = divmod(len(actuals), n)
    counts = Counter(actuals)
    extra = [counts.get(i, 0) - turns for i in range(n)]
    if any(e not in (0, 1) for e in extra) or sum(extra) != rest or set(counts) - set(range(n)):
        return None
    return sum(1 << i for i, e in enumerate(extra) if e)
