"""The apc cache's KV-event log (engines/cache/apc/kv_events.py) against its own pool.

vLLM's BlockPool queues one BlockStored per call that caches blocks, one BlockRemoved per evicted
block and AllBlocksCleared per reset; the log is checked against the pool's eviction counter. (The
served stream of these events: tests/run/test_kv_publisher.py.)
"""

from __future__ import annotations

from engines.cache.apc import KVCacheManager
from engines.cache.apc.kv_events import KvEventLog
from engines.cache.records import AllBlocksCleared, BlockRemoved, BlockStored
from engines.sequence import Sequence


def test_the_event_log_counts_every_eviction():
    """vLLM's BlockPool order on a 4-block pool: three 8-token requests, one after another."""
    manager = KVCacheManager(5, 4, none_hash_seed="0")
    log = manager.block_pool.events = KvEventLog()
    for i in range(3):
        seq = Sequence(f"s{i}", list(range(10 * i, 10 * i + 8)), 8, 1)
        blocks, hit = manager.get_computed_blocks(seq)
        assert hit == 0 and manager.allocate_slots(seq, 8, 0, blocks) is not None
        manager.free(seq)  # done: its two blocks stay cached, evictable
    events = log.take()
    stored = [e for e in events if isinstance(e, BlockStored)]
    removed = [e for e in events if isinstance(e, BlockRemoved)]
    assert [len(e.block_hashes) for e in stored] == [2, 2, 2]
    assert stored[1].parent_block_hash is None and stored[0].token_ids == tuple(range(8))
    assert len(removed) == manager.block_pool.num_evictions == 2  # s2 took s0's blocks
    assert {h for e in removed for h in e.block_hashes} == set(stored[0].block_hashes)
    assert manager.reset_prefix_cache() and log.take() == [AllBlocksCleared()]
