"""KV slot allocators and the request-to-token table (docs/radix.md §5.1, §5.3).

    page 1:  free list of slot ids 1..size, alloc from the front, free appends
    page P:  free list of page ids 1..size/P, slot = page * P + offset, alloc from the front,
             free(idx) frees unique(idx // P) ascending and PREPENDS them (reused first)

Slot 0 / page 0 is the dummy padded tokens write to and is never handed out. Slot ids travel as
int32 arrays (allocations, `SlotRow` request rows, tree values): no per-slot Python objects and no
list<->array conversion per call. A detected double free raises `CacheIntegrityError` (upstream
would silently corrupt its pool).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from engines.cache.radix.slot_row import SLOT_DTYPE, SlotRow
from engines.cache.records import CacheIntegrityError


def as_slots(index: Sequence[int] | np.ndarray) -> np.ndarray:
    """`index` as an int32 array (no copy when it already is one)."""
    return np.asarray(index, dtype=SLOT_DTYPE)


class _FreeGroup:
    """Batched frees (upstream free_group_begin/end): frees between the two calls are collected
    and released together at the end."""

    _group: list[np.ndarray] | None

    def free(self, free_index: Sequence[int] | np.ndarray) -> None:
        raise NotImplementedError

    def free_group_begin(self) -> None:
        self._group = []

    def free_group_end(self) -> None:
        group, self._group = self._group, None
        if group:
            self.free(np.concatenate(group))


class TokenToKVPoolAllocator(_FreeGroup):
    """Page-1 allocator: token-granular slots.

    The FIFO free list is the live window `_buf[_head:_tail]` of an int32 buffer twice the pool's
    size: alloc copies a slice at the head, free copies at the tail, and the window moves back to
    the front only when the tail reaches the end (amortised O(1) per slot, no Python object per
    slot). Every free checks in O(1) that the pool does not overflow; `debug=True` adds the exact
    per-slot double-free check (a flag gather per call; debug_checks runs find doubles through
    `check_integrity` too).
    """

    page_size = 1

    def __init__(self, size: int, debug: bool = False) -> None:
        self.size = size
        self.debug = debug
        self.clear()

    def clear(self) -> None:
        self._buf = np.empty(2 * self.size + 2, dtype=SLOT_DTYPE)
        self._buf[: self.size] = np.arange(1, self.size + 1, dtype=SLOT_DTYPE)
        self._head, self._tail = 0, self.size
        self._unfreeable = np.ones(self.size + 1, dtype=bool)  # debug: free, or the dummy slot 0
        self._group: list[np.ndarray] | None = None

    def available_size(self) -> int:
        return self._tail - self._head

    def alloc(self, need_size: int) -> np.ndarray | None:
        """The first need_size free slots (a fresh int32 array), or None if fewer are free."""
        head = self._head
        if need_size > self._tail - head:
            return None
        out = self._buf[head : head + need_size].copy()
        self._head = head + need_size
        if self.debug:
            self._unfreeable[out] = False
        return out

    def free(self, free_index: Sequence[int] | np.ndarray, start_pos: int = 0) -> None:
        """Queue slots behind the free list (`start_pos` matters only to the paged allocator)."""
        n = len(free_index)
        if n == 0:
            return
        if self._group is not None:  # a copy: a row segment may be rewritten before the end
            self._group.append(np.array(free_index, dtype=SLOT_DTYPE))
            return
        head, tail = self._head, self._tail
        if tail - head + n > self.size:
            raise CacheIntegrityError(f"double free: {tail - head + n} free slots in {self.size}")
        if self.debug:
            self._check_freeable(as_slots(free_index))
        if tail + n > len(self._buf):  # move the live window to the front
            self._buf[: tail - head] = self._buf[head:tail]
            self._head, tail = 0, tail - head
        self._buf[tail : tail + n] = free_index
        self._tail = tail + n

    def _check_freeable(self, slots: np.ndarray) -> None:
        flags = self._unfreeable
        if slots.min() <= 0 or slots.max() > self.size or flags[slots].any():
            bad = next(int(s) for s in slots if s <= 0 or s > self.size or flags[s])
            raise CacheIntegrityError(f"double free or invalid slot {bad}")
        flags[slots] = True

    free_segment = free  # a tree value or a row segment: page 1 frees every slot as given

    def free_slots(self) -> list[int]:
        """Every free slot id, in allocation order (integrity checks)."""
        slots: list[int] = self._buf[self._head : self._tail].tolist()
        return slots

    def free_pages(self) -> np.ndarray:
        """Every free page id (page 1: slot id) as an int32 array, a view (integrity checks of
        a pool with millions of slots)."""
        return self._buf[self._head : self._tail]


class PagedTokenToKVPoolAllocator(_FreeGroup):
    """Page-P allocator: hands out whole pages, frees whole pages."""

    def __init__(self, size: int, page_size: int) -> None:
        if size % page_size:
            raise ValueError(f"pool size {size} is not a multiple of page size {page_size}")
        self.size = size
        self.page_size = page_size
        self.num_pages = size // page_size
        self.clear()

    def clear(self) -> None:
        self._free: deque[int] = deque(range(1, self.num_pages + 1))
        self._is_free = bytearray([0]) + bytearray([1]) * self.num_pages
        self._group: list[np.ndarray] | None = None

    def available_size(self) -> int:
        return len(self._free) * self.page_size

    def _take_pages(self, num_pages: int) -> list[int]:
        free, flags = self._free, self._is_free
        pages = [free.popleft() for _ in range(num_pages)]
        for page in pages:
            flags[page] = 0
        return pages

    def _expand(self, pages: list[int]) -> np.ndarray:
        p = self.page_size
        first = np.asarray(pages, dtype=SLOT_DTYPE) * p
        return (first[:, None] + np.arange(p, dtype=SLOT_DTYPE)).ravel()

    def alloc(self, need_size: int) -> np.ndarray | None:
        if need_size % self.page_size:
            raise ValueError(f"paged alloc of {need_size} tokens is not page-aligned")
        num_pages = need_size // self.page_size
        if num_pages > len(self._free):
            return None
        return self._expand(self._take_pages(num_pages))

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_locs: Sequence[int | None]
    ) -> list[np.ndarray] | None:
        """Slots for positions [prefix_len, seq_len) of each request, in request order.

            prefix_len            seq_len
            ... | x x _ _ | _ _ _ _ | _ _ . . |
                  part 1    part 2    part 3     (rest of the current page, whole pages, partial)

        Part 1 continues at last_loc + 1 inside the page the prefix ends in; parts 2-3 take new
        pages from the front of the free list, request by request.
        """
        p = self.page_size
        num_new = [-(-s // p) - -(-pre // p) for pre, s in zip(prefix_lens, seq_lens)]
        if sum(num_new) > len(self._free):
            return None
        out = []
        for pre, s, last, n in zip(prefix_lens, seq_lens, last_locs, num_new):
            head = min(s, -(-pre // p) * p) - pre  # tokens that still fit the current page
            rest = self._expand(self._take_pages(n))[: s - pre - head]
            if head:  # a request with a prefix holds its last slot
                assert last is not None
                tail_of_page = np.arange(last + 1, last + 1 + head, dtype=SLOT_DTYPE)
                rest = np.concatenate((tail_of_page, rest))
            out.append(rest)
        return out

    def alloc_decode(
        self, seq_lens: Sequence[int], last_locs: Sequence[int | None]
    ) -> list[int] | None:
        """One slot per request for position seq_len - 1: last_loc + 1, or a fresh page's first
        (a request without slots, last_loc None, always starts a page)."""
        p = self.page_size
        needs_page = [(s - 1) % p == 0 for s in seq_lens]
        if sum(needs_page) > len(self._free):
            return None
        slots: list[int] = []
        for fresh, last in zip(needs_page, last_locs):
            if fresh:
                slots.append(self._take_pages(1)[0] * p)
            else:
                assert last is not None  # mid-page: the request holds the page's earlier slots
                slots.append(last + 1)
        return slots

    def free(self, free_index: Sequence[int] | np.ndarray) -> None:
        if len(free_index) == 0:
            return
        if self._group is not None:
            self._group.append(np.array(free_index, dtype=SLOT_DTYPE))
            return
        self._free_pages(np.unique(as_slots(free_index) // self.page_size).tolist())

    def free_segment(self, free_index: Sequence[int] | np.ndarray, start_pos: int = 0) -> None:
        """Free a segment that starts on a page boundary: the page of every P-th slot, row order."""
        p = self.page_size
        slots = as_slots(free_index)
        first = (-start_pos) % p
        picks = slots[first::p]
        if first and len(slots):
            picks = np.concatenate((slots[:1], picks))
        if self._group is not None:
            self._group.append(picks.copy())
            return
        self._free_pages((picks // p).tolist())

    def _free_pages(self, pages: list[int]) -> None:
        flags = self._is_free
        for page in pages:
            if page <= 0 or flags[page]:
                raise CacheIntegrityError(f"double free or invalid page {page}")
            flags[page] = 1
        self._free.extendleft(reversed(pages))  # prepend as a block, order kept

    def free_slots(self) -> list[int]:
        slots: list[int] = self._expand(list(self._free)).tolist()
        return slots

    def free_pages(self) -> np.ndarray:
        return np.fromiter(self._free, dtype=SLOT_DTYPE, count=len(self._free))


class ReqToTokenPool:
    """Rows of slot ids, one per running request; row 0 is padding and never handed out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.clear()

    def clear(self) -> None:
        self.free_rows = list(range(1, self.size + 1))
        self.rows: list[SlotRow | None] = [None] * (self.size + 1)

    def available_size(self) -> int:
        return len(self.free_rows)

    def alloc(self) -> int | None:
        """Take a row from the end of the free list (the most recently freed is reused first)."""
        if not self.free_rows:
            return None
        row = self.free_rows.pop()
        self.rows[row] = SlotRow()
        return row

    def row(self, index: int) -> SlotRow:
        """The row `index` of a running request."""
        row = self.rows[index]
        if row is None:
            raise CacheIntegrityError(f"req_to_token row {index} is not held by a request")
        return row

    def free(self, row: int) -> None:
        if self.rows[row] is None:
            raise CacheIntegrityError(f"req_to_token row {row} freed twice")
        self.rows[row] = None
        self.free_rows.append(row)
