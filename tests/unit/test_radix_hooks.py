"""Request-level wrappers (docs/radix.md §5.4, §6) and the `PrefixCache` face of the radix cache."""

from __future__ import annotations

import pytest

from engines.cache.protocol import PrefixCache
from engines.cache.radix.hooks import checkpoint_kv_cache, extra_key_of, match_request
from engines.cache.radix.key import RadixKey as K
from engines.cache.records import CacheIntegrityError
from tests.radix_support import admit, decode_to_end, make_seq, new_cache, retract, serve


def test_match_cap_and_uncapped_match():
    cache = new_cache()
    prompt = list(range(1, 21))
    serve(cache, make_seq("w", prompt, [50]))
    again = make_seq("a", prompt)
    assert match_request(cache.tree, again).device_prefix_len == 19
    assert match_request(cache.tree, again, capped=False).device_prefix_len == 20
    assert cache.match(again, capped=False).num_tokens == 20
    no_read = make_seq("b", prompt)
    no_read.skip_cache_read = True  # logprob_start_len = 0: nothing may be read
    assert cache.match(no_read).num_tokens == 0


def test_extra_key_joins_caller_key_and_lora():
    assert extra_key_of(make_seq("a", [1])) is None
    assert extra_key_of(make_seq("a", [1], lora_id="L1")) == "L1"
    assert extra_key_of(make_seq("a", [1], lora_id="L1", tags={"extra_key": "k:"})) == "k:L1"
    cache = new_cache()
    serve(cache, make_seq("w", [1, 2, 3, 4], [5], lora_id="L1"))
    assert cache.match(make_seq("x", [1, 2, 3, 4, 9])).num_tokens == 0
    assert cache.match(make_seq("y", [1, 2, 3, 4, 9], lora_id="L1")).num_tokens == 4


def test_checkpoint_after_prefill_makes_the_prompt_matchable_and_moves_the_lock():
    cache = new_cache()
    seq = make_seq("r", list(range(1, 11)), [20, 21])
    st = admit(cache, seq)
    assert cache.match(make_seq("q", list(range(1, 11)) + [0])).num_tokens == 0  # not before
    seq.token_ids.append(20)
    checkpoint_kv_cache(cache, st, seq)
    assert (st.prefix_len, st.cache_protected_len, st.cache_inserted_len) == (10, 10, 10)
    assert st.lock.node is st.last_node and st.last_node.lock_ref == 1
    assert cache.tree.protected_size() == 10 and cache.private_tokens() == 0
    assert cache.match(make_seq("q", list(range(1, 11)) + [0])).num_tokens == 10
    cache.check_integrity()


def test_release_after_retraction_inserts_nothing_and_frees_private_slots():
    cache = new_cache(capacity=64)
    seq = make_seq("r", list(range(1, 11)), [20, 21, 22])
    admit(cache, seq)
    decode_to_end(cache, seq)
    retract(cache, seq)
    assert cache.tree.total_size() == 0
    assert (
        cache.allocator.available_size() == 64
        and cache.req_to_token_pool.available_size() == cache.req_to_token_pool.size
    )
    cache.check_integrity()


def test_finished_request_is_inserted_up_to_its_committed_tokens():
    cache = new_cache(capacity=64)
    seq = make_seq("r", [1, 2, 3], [4, 5, 6])
    serve(cache, seq)
    assert cache.tree.total_size() == 5  # 3 + 3 - 1: the last sampled token has no KV
    assert cache.allocator.available_size() == 64 - 5


def test_disabled_mode_caches_nothing_and_frees_everything():
    cache = new_cache(capacity=64, enabled=False)
    seq = make_seq("r", list(range(1, 11)), [20, 21])
    st = admit(cache, seq)
    seq.token_ids.append(20)
    checkpoint_kv_cache(cache, st, seq)
    assert cache.tree.total_size() == 0 and cache.usage().protected == 10
    cache.check_integrity()
    cache.release(seq, finished=True)
    assert cache.allocator.available_size() == 64
    assert serve(cache, make_seq("again", list(range(1, 11)), [20])) == 10


def test_prefill_evicts_only_the_shortfall():
    cache = new_cache(capacity=20)
    for i in range(4):  # four cached leaves of 4 tokens (prompt 4 + 1 output)
        serve(cache, make_seq(f"w{i}", [100 * i + k for k in range(4)], [9]))
    assert cache.allocator.available_size() == 4 and cache.tree.evictable_size() == 16
    serve(cache, make_seq("new", list(range(500, 507)), [1]))  # needs 7: shortfall 3 -> one leaf
    assert cache.stats().num_evictions == 1
    assert cache.match(make_seq("q", [0, 1, 2, 3, 7])).num_tokens == 0  # w0 was the LRU leaf
    assert cache.match(make_seq("q", [100, 101, 102, 103, 7])).num_tokens == 4


def test_paged_prefill_asks_for_extend_plus_a_page_per_request():
    cache = new_cache(page_size=4, capacity=24)
    for i in range(4):  # four 4-token leaves; one page left free
        serve(cache, make_seq(f"w{i}", [100 * i + k for k in range(4)], [9]))
    assert cache.allocator.available_size() == 8  # each request's tail page came back
    seq = make_seq("new", list(range(500, 505)), [1])  # extend 5, need 5 + 4 = 9 > 8
    admit(cache, seq)
    assert cache.stats().num_evictions == 1
    cache.check_integrity()


def test_block_table_is_the_row_per_page():
    for page_size in (1, 4):
        cache = new_cache(page_size=page_size, capacity=64)
        seq = make_seq("r", list(range(1, 11)), [20])
        st = admit(cache, seq)
        row = cache.req_to_token_pool.rows[st.row]
        table = cache.block_table(seq)
        assert len(table) == -(-10 // page_size)
        for pos, slot in enumerate(row):
            assert table[pos // page_size] * page_size + pos % page_size == slot
        assert cache.block_table(make_seq("unknown", [1])) == []


def test_reset_refuses_while_a_request_holds_kv():
    cache = new_cache()
    seq = make_seq("r", [1, 2, 3], [4])
    admit(cache, seq)
    assert cache.reset() is False
    cache.release(seq, finished=False)
    cache.release(seq, finished=False)  # unknown now: a no-op
    assert cache.reset() is True and cache.stats().num_evictions == 0


def test_integrity_check_catches_a_leak():
    cache = new_cache(capacity=16)
    serve(cache, make_seq("r", [1, 2, 3], [4]))
    cache.check_integrity()
    cache.allocator.alloc(2)  # slots nobody owns
    with pytest.raises(CacheIntegrityError):
        cache.check_integrity()


def test_radix_cache_satisfies_the_protocol():
    cache = new_cache(page_size=4, capacity=64)
    assert isinstance(cache, PrefixCache)
    assert (cache.block_size, cache.num_blocks, cache.capacity_tokens) == (4, 17, 64)
    u = cache.usage()
    assert (u.capacity, u.available, u.evictable, u.protected) == (64, 64, 0, 0)


def test_prepare_extend_writes_the_path_slots_first():
    cache = new_cache()
    serve(cache, make_seq("w", [1, 2, 3, 4, 5], [6]))
    seq = make_seq("r", [1, 2, 3, 4, 5, 7], [8])
    st = admit(cache, seq)
    path = cache.tree.path_device_indices(
        cache.tree.match_prefix(K([1, 2, 3, 4, 5])).last_device_node
    )
    assert cache.req_to_token_pool.rows[st.row][:5].tolist() == path.tolist()
    assert (st.kv_committed_len, st.kv_allocated_len, st.extend_end) == (6, 6, 6)
