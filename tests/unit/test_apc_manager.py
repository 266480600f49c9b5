"""KVCacheManager (docs/apc.md §4, §10) and verify_tokens_on_hit (issue [7/8])."""

from __future__ import annotations

import hashlib
import pickle

import pytest

from engines.cache.apc import ApcCache, KVCacheManager
from engines.cache.apc.hashing import extra_hash_fn
from engines.sequence import Sequence

_CALLS = {"n": 0}


def _counting(obj) -> bytes:
    _CALLS["n"] += 1
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _weak(obj) -> bytes:
    """Deliberately weak: ignores the token values, so equal-length chains collide."""
    if not isinstance(obj, tuple):
        return hashlib.sha256(repr(obj).encode()).digest()
    parent, tokens, extra = obj
    return hashlib.sha256(parent + repr((len(tokens), extra)).encode()).digest()


@pytest.fixture(autouse=True, scope="module")
def _test_digests():
    """The two test digests exist only while this module runs (the registry is process-wide)."""
    with extra_hash_fn("test_counting", _counting), extra_hash_fn("test_weak", _weak):
        yield


def S(seq_id, tokens, **kw) -> Sequence:
    return Sequence(seq_id, list(tokens), len(tokens), 8, **kw)


def admit(m: KVCacheManager, seq: Sequence) -> int | None:
    blocks, hit = m.get_computed_blocks(seq)
    if m.allocate_slots(seq, seq.num_tokens - hit, hit, blocks) is None:
        return None
    m.record_admission(seq, hit)
    seq.num_computed_tokens = seq.num_tokens
    return hit


def test_zero_new_tokens_is_an_error():
    m = KVCacheManager(8, 16)
    with pytest.raises(ValueError):
        m.allocate_slots(S("a", range(10)), 0)


def test_each_block_is_hashed_once_per_request():
    m = KVCacheManager(64, 16, hash_algo="test_counting", none_hash_seed="0")
    a = S("a", range(100))
    _CALLS["n"] = 0
    admit(m, a)
    m.get_computed_blocks(a)  # a second lookup reuses the memo
    assert _CALLS["n"] == 6
    for t in range(12):  # decode to 112 tokens: exactly one more full block
        a.token_ids.append(500 + t)
        m.allocate_slots(a, 1)
        a.num_computed_tokens += 1
    assert _CALLS["n"] == 7 and m.num_block_hashes(a) == 7


def test_free_releases_tail_first_and_forget_drops_hashes():
    m = KVCacheManager(8, 16)
    a = S("a", range(40))
    admit(m, a)
    m.free(a)
    assert [b.block_id for b in m.block_pool.free_block_queue.get_all_free_blocks()] == [
        3,
        4,
        5,
        6,
        7,
        2,
        1,
    ]
    assert m.num_block_hashes(a) == 2  # kept for a preempted request
    m.forget(a)
    assert m.num_block_hashes(a) == 0
    m.free(S("never", range(3)))  # unknown request: no-op


def test_full_sequence_must_fit_counts_the_whole_current_sequence():
    m = KVCacheManager(5, 16)  # 4 usable blocks
    big = S("big", range(80))
    assert m.allocate_slots(big, 16, full_sequence_must_fit=True) is None
    assert m.allocate_slots(big, 16) is not None and m.get_block_ids(big) == [1]


def test_lookahead_tokens_allocate_ahead_but_are_not_cached():
    m = KVCacheManager(16, 16)
    a = S("a", range(16))
    m.allocate_slots(a, 16, num_lookahead_tokens=20)
    assert m.get_block_ids(a) == [1, 2, 3] and m.num_cached_block["a"] == 1


def test_stats_timing_and_per_step_handoff():
    lookup = KVCacheManager(5, 16, stats_timing="lookup")
    admission = KVCacheManager(5, 16, stats_timing="admission")
    for m in (lookup, admission):
        admit(m, S("a", range(48)))
        m.free(S("a", range(48)))
        assert admit(m, S("big", list(range(48)) + list(range(900, 932)))) is None
    assert (lookup.total_stats.requests, lookup.total_stats.queries, lookup.total_stats.hits) == (
        2,
        128,
        48,
    )
    assert (admission.total_stats.requests, admission.total_stats.queries) == (1, 48)
    step = lookup.make_prefix_cache_stats()
    assert step.requests == 2 and lookup.prefix_cache_stats.requests == 0
    assert lookup.total_stats.requests == 2


def test_unknown_stats_timing_and_hash_algo():
    with pytest.raises(ValueError, match="valid: admission, lookup"):
        KVCacheManager(4, 16, stats_timing="never")
    with pytest.raises(ValueError, match="valid:"):
        KVCacheManager(4, 16, hash_algo="md5")


def test_seq_id_reuse_by_another_sequence_rehashes():
    m = KVCacheManager(16, 16)
    first = S("x", range(32))
    k1 = list(m.block_keys(first))
    second = S("x", range(100, 132))
    assert m.block_keys(second) != k1


def test_tokens_dropped_from_the_end_rehash():
    """SGLang's overlap retraction drops a request's in-flight token: a block it completed is
    no longer full, and the block sampled again with another token hashes anew."""
    m = KVCacheManager(16, 16)
    seq = S("x", range(32))
    keys = list(m.block_keys(seq))
    del seq.token_ids[-1]
    assert m.block_keys(seq) == keys[:1]
    seq.token_ids.append(999)
    assert m.block_keys(seq) == [keys[0], m.block_keys(S("y", [*range(31), 999]))[1]]


@pytest.mark.parametrize("verify,expected_hit", [(False, 32), (True, 0)])
def test_weak_hash_wrong_reuse_and_verification(verify, expected_hit):
    cache = ApcCache(16, 16, hash_algo="test_weak", verify_tokens_on_hit=verify, none_hash_seed="0")
    m = cache.manager
    admit(m, S("a", range(40)))
    other = S("b", range(500, 540))  # different tokens, same weak hashes
    assert admit(m, other) == expected_hit
    cache.check_integrity()


def test_verification_stops_at_the_first_mismatching_block():
    cache = ApcCache(16, 4, hash_algo="test_weak", verify_tokens_on_hit=True, none_hash_seed="0")
    m = cache.manager
    admit(m, S("a", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]))
    assert admit(m, S("b", [1, 2, 3, 4, 0, 0, 0, 0, 9, 10, 11, 12, 13])) == 4
    assert admit(m, S("c", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])) == 12
