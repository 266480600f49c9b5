"""APC's decode run (KVCacheManager.allocate_decode_run) equals its per-step allocations:
the same tables, cached blocks, free queue and evictions."""

from __future__ import annotations

import numpy as np
import pytest

from engines.cache.apc.cache import ApcCache
from tests.decode_run_support import admit, decoding, run_both


def _apc_state(cache: ApcCache) -> tuple:
    pool = cache.pool
    return (
        {sid: [b.block_id for b in t] for sid, t in cache.manager.req_to_blocks.items()},
        dict(cache.manager.num_cached_block),
        [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
        sorted(
            (k, b.block_id)
            for k in pool.cached_block_hash_to_block
            for b in pool.cached_block_hash_to_block.get_all_blocks(k)
        ),
        pool.num_evictions,
    )


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.parametrize("seed", range(4))
def test_apc_run_equals_per_step_allocation(seed, lag):
    rng = np.random.default_rng(seed)
    bs = 4
    # A pool that finished requests fill with cached blocks: the run's blocks evict them lazily.
    warm = decoding(16, seed + 100, bs)
    used = sum(-(-(seq.num_tokens - 1) // bs) for seq in warm)
    cache = ApcCache(num_blocks=used + 1, block_size=bs)
    admit(cache, warm)
    for seq in warm:
        cache.release(seq, finished=True)
    seqs = decoding(5, seed, bs)
    admit(cache, seqs)
    limits = [None if lag == 0 else seq.num_tokens - 1 for seq in seqs]
    num_steps = 13
    free_blocks = cache.pool.get_num_free_blocks()
    need = cache.decode_run_tokens(seqs, num_steps)
    assert need <= free_blocks * bs
    stepped, ran = run_both(cache, seqs, num_steps, limits, lag, rng)
    assert _apc_state(ran) == _apc_state(stepped)
    assert ran.pool.num_evictions > 0  # the run's blocks evicted cached ones from the queue head
    assert (free_blocks - ran.pool.get_num_free_blocks()) * bs == need
    ran.check_integrity()
