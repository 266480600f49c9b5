"""Radix's decode run (prepare_decode_run) equals its per-step decode allocations: the same
tables, free slots and usage."""

from __future__ import annotations

import numpy as np
import pytest

from engines.cache.radix.cache import RadixCache
from engines.sequence import Sequence
from tests.decode_run_support import admit, decoding, run_both


def _radix_state(cache: RadixCache) -> tuple:
    return (
        {sid: cache.block_table(Sequence(sid, [], 0, 0)) for sid in cache.reqs},
        cache.allocator.free_slots(),
        cache.usage(),
    )


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("seed", range(3))
def test_radix_run_equals_per_step_allocation(seed, page_size):
    rng = np.random.default_rng(seed)
    cache = RadixCache(page_size=page_size, capacity_tokens=4096)
    seqs = decoding(5, seed, page_size)
    admit(cache, seqs)
    num_steps = 11
    before = cache.allocator.available_size()
    need = cache.decode_run_tokens(seqs, num_steps)
    stepped, ran = run_both(cache, seqs, num_steps, [None] * len(seqs), 0, rng)
    assert _radix_state(ran) == _radix_state(stepped)
    assert before - ran.allocator.available_size() == need
    ran.check_integrity()
