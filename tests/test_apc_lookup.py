"""find_longest_cache_hit without token verification (the C-level run of map hits): the leading
cached blocks up to the first miss and the cap, and under a key cached twice the first inserted
block, as the edge-by-edge lookup with verification returns on the same map."""

from __future__ import annotations

import pytest

from engines.cache.apc import ApcCache
from engines.sequence import Sequence

BS = 4


def _cached(manager, seq_id: str, tokens: list[int]) -> list:
    """Allocate and cache a request's blocks without a lookup (so equal contents duplicate)."""
    seq = Sequence(seq_id, tokens, len(tokens), 1)
    return manager.allocate_slots(seq, len(tokens))


@pytest.mark.parametrize("verify", [False, True])
def test_hits_stop_at_the_first_miss_and_take_the_first_duplicate(verify):
    manager = ApcCache(64, BS, none_hash_seed="0", verify_tokens_on_hit=verify).manager
    tokens = list(range(100, 124))  # 6 blocks
    first = _cached(manager, "a", tokens)
    second = _cached(manager, "b", tokens)  # the same 6 keys again: duplicates in the map
    assert [b.block_id for b in first] != [b.block_id for b in second]
    probe = Sequence("p", tokens[:16] + [7, 7, 7, 7] + tokens[20:], 24, 1)
    hits = manager.find_longest_cache_hit(probe, 24)
    assert hits == first[:4]  # block 4 differs: the lookup stops there
    capped = manager.find_longest_cache_hit(Sequence("q", tokens, 24, 1), 11)
    assert capped == first[:2]
    assert manager.find_longest_cache_hit(Sequence("r", [1] + tokens[1:], 24, 1), 24) == []
