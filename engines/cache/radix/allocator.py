"""KV slot allocators and the request-to-token table (docs/radix.md §5.1, §5.3).

    page 1:  free list of slot ids 1..size, alloc from the front, free appends
    page P:  free list of page ids 1..size/P, slot = page * P + offset, alloc from the front,
             free(idx) frees unique(idx // P) ascending and PREPENDS them (reused first)

Slot 0 / page 0 is the dummy padded tokens write to and is never handed out. A free of something
already free raises `CacheIntegrityError` (upstream would silently corrupt its pool).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from engines.cache.base import CacheIntegrityError


class _FreeGroup:
    """Batched frees (upstream free_group_begin/end): frees between the two calls are collected
    and released together at the end."""

    _group: list[int] | None

    def free(self, free_index: Sequence[int]) -> None:
        raise NotImplementedError

    def free_group_begin(self) -> None:
        self._group = []

    def free_group_end(self) -> None:
        group, self._group = self._group, None
        if group:
            self.free(group)


class TokenToKVPoolAllocator(_FreeGroup):
    """Page-1 allocator: token-granular slots."""

    page_size = 1

    def __init__(self, size: int) -> None:
        self.size = size
        self.clear()

    def clear(self) -> None:
        # FIFO free list as a Python list with a moving head: alloc is one slice, free one extend
        # (a per-slot deque loop dominated radix bookkeeping on whole-trace replays).
        self._free: list[int] = list(range(1, self.size + 1))
        self._head = 0
        self._is_free = np.ones(self.size + 1, dtype=bool)
        self._is_free[0] = False  # slot 0 is the dummy, never handed out
        self._group: list[int] | None = None

    def available_size(self) -> int:
        return len(self._free) - self._head

    def alloc(self, need_size: int) -> list[int] | None:
        if need_size > self.available_size():
            return None
        head = self._head
        out = self._free[head : head + need_size]
        self._head = head + need_size
        if self._head > 4096 and 2 * self._head > len(self._free):
            del self._free[: self._head]
            self._head = 0
        self._is_free[out] = False
        return out

    def free(self, free_index: Sequence[int]) -> None:
        if len(free_index) == 0:
            return
        if self._group is not None:
            self._group.extend(free_index)
            return
        slots = np.asarray(free_index, dtype=np.int64)
        if slots.min() <= 0 or self._is_free[slots].any():
            bad = next(int(s) for s in slots if s <= 0 or self._is_free[s])
            raise CacheIntegrityError(f"double free or invalid slot {bad}")
        self._is_free[slots] = True
        self._free.extend(slots.tolist())

    def free_segment(self, free_index: Sequence[int], start_pos: int = 0) -> None:
        """Free a tree value or a row segment (page 1: the same as `free`)."""
        self.free(free_index)

    def free_slots(self) -> list[int]:
        """Every free slot id (integrity checks)."""
        return self._free[self._head :]


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
        self._group: list[int] | None = None

    def available_size(self) -> int:
        return len(self._free) * self.page_size

    def _take_pages(self, num_pages: int) -> list[int]:
        free, flags = self._free, self._is_free
        pages = [free.popleft() for _ in range(num_pages)]
        for page in pages:
            flags[page] = 0
        return pages

    def _expand(self, pages: list[int]) -> list[int]:
        p = self.page_size
        return [page * p + off for page in pages for off in range(p)]

    def alloc(self, need_size: int) -> list[int] | None:
        if need_size % self.page_size:
            raise ValueError(f"paged alloc of {need_size} tokens is not page-aligned")
        num_pages = need_size // self.page_size
        if num_pages > len(self._free):
            return None
        return self._expand(self._take_pages(num_pages))

    def alloc_extend(
        self, prefix_lens: Sequence[int], seq_lens: Sequence[int], last_locs: Sequence[int | None]
    ) -> list[list[int]] | None:
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
            slots = [last + 1 + i for i in range(head)] if head else []
            slots.extend(self._expand(self._take_pages(n))[: s - pre - head])
            out.append(slots)
        return out

    def alloc_decode(self, seq_lens: Sequence[int], last_locs: Sequence[int]) -> list[int] | None:
        """One slot per request for position seq_len - 1: last_loc + 1, or a fresh page's first."""
        p = self.page_size
        needs_page = [(s - 1) % p == 0 for s in seq_lens]
        if sum(needs_page) > len(self._free):
            return None
        return [
            self._take_pages(1)[0] * p if fresh else last + 1
            for fresh, last in zip(needs_page, last_locs)
        ]

    def free(self, free_index: Sequence[int]) -> None:
        if not free_index:
            return
        if self._group is not None:
            self._group.extend(free_index)
            return
        self._free_pages(sorted({slot // self.page_size for slot in free_index}))

    def free_segment(self, free_index: Sequence[int], start_pos: int = 0) -> None:
        """Free a segment that starts on a page boundary: the page of every P-th slot, row order."""
        p = self.page_size
        first = (-start_pos) % p
        picks = list(free_index[first::p])
        if first and free_index:
            picks.insert(0, free_index[0])
        if self._group is not None:
            self._group.extend(picks)
            return
        self._free_pages([slot // p for slot in picks])

    def _free_pages(self, pages: list[int]) -> None:
        flags = self._is_free
        for page in pages:
            if page <= 0 or flags[page]:
                raise CacheIntegrityError(f"double free or invalid page {page}")
            flags[page] = 1
        self._free.extendleft(reversed(pages))  # prepend as a block, order kept

    def free_slots(self) -> list[int]:
        return self._expand(list(self._free))


class ReqToTokenPool:
    """Rows of slot ids, one per running request; row 0 is padding and never handed out."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.clear()

    def clear(self) -> None:
        self.free_rows = list(range(1, self.size + 1))
        self.rows: list[list[int] | None] = [None] * (self.size + 1)

    def available_size(self) -> int:
        return len(self.free_rows)

    def alloc(self) -> int | None:
        """Take a row from the end of the free list (the most recently freed is reused first)."""
        if not self.free_rows:
            return None
        row = self.free_rows.pop()
        self.rows[row] = []
        return row

    def free(self, row: int) -> None:
        if self.rows[row] is None:
            raise CacheIntegrityError(f"req_to_token row {row} freed twice")
        self.rows[row] = None
        self.free_rows.append(row)
