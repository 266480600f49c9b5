"""`SlotRow`: one `req_to_token` row, the slot of every position a request holds KV for.

Rows grow by append/extend into an int32 buffer (amortised doubling) and read like lists, but
slice reads are views, so a checkpoint rewrites or frees a row segment without copying it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

SLOT_DTYPE = np.int32  # slot ids travel as int32 arrays: allocator, tree values, request rows


class SlotRow:
    """One `req_to_token` row: the slot of every position a request holds KV for, in a growable
    int32 buffer. List-like (len, append, extend, int and slice reads and writes); slice reads
    are views of the buffer, so callers that keep them must copy (the tree does)."""

    __slots__ = ("_buf", "_len")

    def __init__(self) -> None:
        self._buf = np.empty(16, dtype=SLOT_DTYPE)
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def _reserve(self, size: int) -> None:
        if size > len(self._buf):
            grown = np.empty(max(size, 2 * len(self._buf)), dtype=SLOT_DTYPE)
            grown[: self._len] = self._buf[: self._len]
            self._buf = grown

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> np.ndarray: ...

    def __getitem__(self, index: int | slice) -> int | np.ndarray:
        if isinstance(index, slice):
            return self._buf[: self._len][index]
        return int(self._buf[: self._len][index])

    def __setitem__(self, index: slice, values: Sequence[int] | np.ndarray) -> None:
        """`row[:] = v` replaces the whole row; `row[a:b] = v` overwrites existing positions."""
        if index == slice(None):
            self._len = 0
            self.extend(values)
            return
        start, stop, step = index.indices(self._len)
        if step != 1 or max(stop - start, 0) != len(values):
            raise ValueError(f"row write {index} of {len(values)} slots changes the row's length")
        self._buf[start:stop] = values

    def append(self, slot: int) -> None:
        n = self._len
        if n == len(self._buf):  # one decode token per step: grow only when full
            self._reserve(n + 1)
        self._buf[n] = slot
        self._len = n + 1

    def extend(self, slots: Sequence[int] | np.ndarray) -> None:
        n = len(slots)
        self._reserve(self._len + n)
        self._buf[self._len : self._len + n] = slots
        self._len += n

    def tolist(self) -> list[int]:
        slots: list[int] = self._buf[: self._len].tolist()
        return slots

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, SlotRow)) else NotImplemented

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    def __repr__(self) -> str:
        return f"SlotRow({self.tolist()})"
