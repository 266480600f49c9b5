"""Slot and page allocators and the request-to-token table (docs/radix.md §5.1, §5.3)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from engines.cache.radix.allocator import (
    PagedTokenToKVPoolAllocator,
    ReqToTokenPool,
    TokenToKVPoolAllocator,
)
from engines.cache.radix.slot_row import SlotRow
from engines.cache.records import CacheIntegrityError


def test_token_allocator_takes_from_the_front_and_appends_frees():
    alloc = TokenToKVPoolAllocator(6)
    first = alloc.alloc(3)
    assert first.tolist() == [1, 2, 3] and alloc.available_size() == 3
    alloc.free([2, 1])
    assert alloc.alloc(5).tolist() == [4, 5, 6, 2, 1]  # freed slots queue behind the untouched ones
    assert alloc.available_size() == 0 and alloc.alloc(1) is None


def test_token_allocator_refuses_double_frees_and_slot_zero_in_debug_mode():
    alloc = TokenToKVPoolAllocator(4, debug=True)
    slots = alloc.alloc(2)
    alloc.free(slots)
    with pytest.raises(CacheIntegrityError):
        alloc.free([slots[0]])
    with pytest.raises(CacheIntegrityError):
        alloc.free([0])


def test_token_allocator_refuses_a_free_that_would_overflow_the_pool():
    alloc = TokenToKVPoolAllocator(4)
    slots = alloc.alloc(2)
    alloc.free(slots[:1])  # 3 free
    with pytest.raises(CacheIntegrityError, match="double free"):
        alloc.free(slots)  # slots[0] again: 5 free slots in a pool of 4
    assert alloc.available_size() == 3


def test_token_allocator_free_window_wraps_and_keeps_fifo_order():
    alloc, model = TokenToKVPoolAllocator(5), deque(range(1, 6))  # model: a plain FIFO
    for n in (3, 2, 4, 1, 5, 3, 4):  # the live window reaches the buffer's end several times
        slots = alloc.alloc(n).tolist()
        assert slots == [model.popleft() for _ in range(n)]
        alloc.free(slots[::-1])
        model.extend(slots[::-1])
        assert alloc.free_slots() == list(model)


def test_token_allocator_free_group_frees_once_at_the_end():
    alloc = TokenToKVPoolAllocator(4)
    slots = alloc.alloc(4)
    alloc.free_group_begin()
    alloc.free([slots[3]])
    alloc.free([slots[0]])
    assert alloc.available_size() == 0
    alloc.free_group_end()
    assert alloc.free_slots() == [4, 1]


def test_paged_alloc_hands_out_whole_pages_from_the_front():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    assert alloc.available_size() == 16
    assert alloc.alloc(8).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(ValueError):
        alloc.alloc(3)
    assert alloc.alloc(12) is None


def test_paged_free_prepends_unique_pages_in_ascending_order():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    alloc.alloc(16)
    alloc.free([9, 8, 15, 13])  # pages 2 and 3
    alloc.free([4])  # page 1, freed last: reused first
    assert alloc.alloc(12).tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]


def test_paged_free_segment_frees_every_pth_slot_in_row_order():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    alloc.alloc(16)
    alloc.free_segment([12, 13, 14, 15, 4, 5])  # a row segment over pages 3 and 1
    assert alloc.free_slots()[::4] == [12, 4]


def test_paged_free_group_sorts_pages_across_frees():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    alloc.alloc(16)
    alloc.free_group_begin()
    alloc.free_segment([12, 13])
    alloc.free_segment([4, 5, 6, 7])
    alloc.free_group_end()
    assert alloc.free_slots()[::4] == [4, 12]


def test_paged_double_free_raises():
    alloc = PagedTokenToKVPoolAllocator(8, 4)
    alloc.alloc(8)
    alloc.free([4])
    with pytest.raises(CacheIntegrityError):
        alloc.free([5])


def test_alloc_extend_fills_the_partial_page_then_new_pages():
    alloc = PagedTokenToKVPoolAllocator(32, 4)
    row = alloc.alloc(4)[:2]  # a request holding positions 0-1 in page 1
    parts = alloc.alloc_extend([2, 0], [9, 3], [row[-1], None])
    # part 1: 6, 7; part 2: page 2; part 3: page 3
    assert parts[0].tolist() == [6, 7, 8, 9, 10, 11, 12]
    assert parts[1].tolist() == [16, 17, 18]  # the next request's pages follow
    assert alloc.available_size() == 32 - 16
    assert alloc.alloc_extend([0], [100], [None]) is None


def test_alloc_decode_takes_a_new_page_only_when_the_current_one_is_full():
    alloc = PagedTokenToKVPoolAllocator(16, 4)
    a, b = alloc.alloc(4), alloc.alloc(4)  # pages 1 and 2
    # a holds positions 0-1 (slots 4, 5); b holds 0-3 (slots 8-11)
    assert alloc.alloc_decode([3, 5], [a[1], b[3]]) == [6, 12]  # a continues; b opens page 3
    assert alloc.available_size() == 4


def test_req_to_token_pool_rows():
    pool = ReqToTokenPool(3)
    rows = [pool.alloc() for _ in range(3)]
    assert 0 not in rows and sorted(rows) == [1, 2, 3]
    assert pool.alloc() is None
    pool.free(rows[1])
    assert pool.alloc() == rows[1]  # the most recently freed row comes back first
    with pytest.raises(CacheIntegrityError):
        pool.free(rows[0]) or pool.free(rows[0])
    pool.clear()
    assert pool.available_size() == 3


def test_slot_rows_behave_like_lists_of_slots():
    row = SlotRow()
    assert len(row) == 0 and not row
    row.extend(np.arange(10, 30, dtype=np.int32))  # past the initial buffer: it grows
    row.append(99)
    assert len(row) == 21 and row[-1] == 99 and isinstance(row[0], int)
    assert row[2:5].tolist() == [12, 13, 14]
    row[2:5] = [7, 8, 9]
    assert row.tolist()[:6] == [10, 11, 7, 8, 9, 15]
    row[:] = [1, 2]
    assert row == [1, 2] and row.tolist() == [1, 2]
    row[5:3] = []  # an empty write (a checkpoint behind the protected length)
    with pytest.raises(ValueError, match="changes the row's length"):
        row[0:1] = [1, 2]


def test_frees_inside_a_group_copy_their_slots():
    alloc = TokenToKVPoolAllocator(8)
    row = SlotRow()
    row.extend(alloc.alloc(4))
    alloc.free_group_begin()
    alloc.free(row[0:2])
    row[0:2] = [0, 0]  # rewritten before the group ends (a checkpoint's row rewrite)
    alloc.free_group_end()
    assert alloc.free_slots() == [5, 6, 7, 8, 1, 2]
