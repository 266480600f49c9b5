"""Every numbered invariant of docs/apc.md §12 (1-32), with the spec's own numbers, plus the
worked examples of §11. Requests are driven as §12 says: lookup, allocate_slots for the whole
prompt (unless a chunk is stated), one token per decode step, free on finish."""

from __future__ import annotations

import hashlib
import pickle
import random
from collections import deque

import pytest

from engines.cache.apc import ApcCache
from engines.cache.apc.hashing import block_extra_keys
from engines.cache.records import CacheIntegrityError
from engines.sched.base import StepBudget
from engines.sched.vllm import VllmScheduler as ApcAdmission
from engines.sequence import SeqStatus, Sequence

BASE = list(range(1000, 1200))


def make(num_blocks=64, bs=16, order="v024", **kw) -> ApcCache:
    return ApcCache(num_blocks, bs, free_order=order, none_hash_seed="0", **kw)


def S(seq_id, tokens, salt=None, max_new=1, **kw) -> Sequence:
    return Sequence(seq_id, list(tokens), len(tokens), max_new, salt=salt, **kw)


def prefill(cache: ApcCache, seq: Sequence) -> int | None:
    m = cache.manager
    blocks, hit = m.get_computed_blocks(seq)
    if m.allocate_slots(seq, seq.num_tokens - hit, hit, blocks) is None:
        return None
    m.record_admission(seq, hit)
    seq.num_computed_tokens = seq.num_tokens
    cache.check_integrity()
    return hit


def decode(cache: ApcCache, seq: Sequence, token: int) -> None:
    """The sampled token is appended, then scheduled (synchronous scheduler)."""
    seq.token_ids.append(token)
    assert cache.manager.allocate_slots(seq, 1) is not None
    seq.num_computed_tokens += 1
    cache.check_integrity()


def free(cache: ApcCache, seq: Sequence) -> None:
    cache.release(seq, finished=True)
    cache.check_integrity()


def queue(cache: ApcCache) -> list[int]:
    return [b.block_id for b in cache.pool.free_block_queue.get_all_free_blocks()]


def table(cache: ApcCache, seq: Sequence) -> list[int]:
    return cache.block_table(seq)


# ---- 1-3: lookup rules ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "n,hit",
    [(15, 0), (16, 0), (17, 16), (31, 16), (32, 16), (33, 32), (47, 32), (48, 32), (49, 48)],
)
def test_invariant_01_last_token_rule(n, hit):
    cache = make()
    prefill(cache, S("prime", BASE[:64]))
    seq = S("r", BASE[:n])
    assert cache.match(seq).num_tokens == hit == 16 * ((n - 1) // 16)
    assert prefill(cache, seq) == hit


def test_invariant_02_prefix_of_chain_rule():
    for drop, expected in ((0, 0), (2, 32)):
        cache = make()
        a = S("a", BASE[:60])
        prefill(cache, a)
        keys = cache.manager.block_keys(a)
        blk = cache.pool.get_cached_block(keys[drop])
        cache.pool.cached_block_hash_to_block.pop(keys[drop], blk.block_id)
        assert cache.match(S("b", BASE[:60])).num_tokens == expected


def test_invariant_03_only_full_blocks_are_cached():
    cache = make()
    a = S("a", BASE[:55])
    prefill(cache, a)
    blocks = cache.manager.get_blocks(a)
    assert [b.block_id for b in blocks] == [1, 2, 3, 4]
    assert [b.block_hash is not None for b in blocks] == [True, True, True, False]


# ---- 4-7: caching at allocation, duplicates, ref counts, n > 1 ------------------------------
def test_invariant_04_cache_at_allocation():
    cache = make()
    a, b = S("a", BASE[:32]), S("b", BASE[:32])
    prefill(cache, a)  # allocated, no forward pass has run
    assert prefill(cache, b) == 16
    assert table(cache, b) == [1, 3]


def test_invariant_05_no_dedup_first_inserted_wins():
    cache = make()
    a, b = S("a", BASE[:32]), S("b", BASE[:32])
    prefill(cache, a)
    prefill(cache, b)
    m = cache.pool.cached_block_hash_to_block
    keys = cache.manager.block_keys(a)
    assert len(m) == 2
    assert [x.block_id for x in m.get_all_blocks(keys[0])] == [1]
    assert sorted(x.block_id for x in m.get_all_blocks(keys[1])) == [2, 3]
    assert m.get_one_block(keys[1]).block_id == 2


def _children(cache):
    kids = [S(f"{i}_p", BASE[:100]) for i in range(4)]
    hits = [prefill(cache, k) for k in kids]
    return kids, hits


def test_invariant_06_ref_counts():
    cache = make()
    kids, _ = _children(cache)
    for blk in cache.pool.blocks[1:7]:
        assert blk.ref_cnt == 4
    sevenths = [cache.manager.get_blocks(k)[6] for k in kids]
    assert len({b.block_id for b in sevenths}) == 4 and all(b.ref_cnt == 1 for b in sevenths)


def test_invariant_07_parallel_sampling():
    cache = make()
    _, hits = _children(cache)
    assert hits == [0, 96, 96, 96]
    st = cache.stats()
    assert (st.requests, st.queries, st.hits) == (4, 400, 288)


# ---- 8-13: free order, eviction, capacity, atomicity ------------------------------------------
def test_invariant_08_reverse_free_order():
    cache = make(num_blocks=5)
    a = S("a", BASE[:48])
    prefill(cache, a)
    assert table(cache, a) == [1, 2, 3] and queue(cache) == [4]
    free(cache, a)
    assert queue(cache) == [4, 3, 2, 1]


@pytest.mark.parametrize("order", ["classic", "v024"])
def test_invariant_09_tail_first_eviction_preserves_reuse(order):
    cache = make(num_blocks=5, order=order)
    a = S("a", BASE[:48])
    prefill(cache, a)
    free(cache, a)
    u1, u2 = S("u1", range(5000, 5016)), S("u2", range(6000, 6016))
    prefill(cache, u1)
    prefill(cache, u2)
    assert table(cache, u1) == [4] and table(cache, u2) == [3]
    free(cache, u1)
    free(cache, u2)
    again = S("a2", BASE[:48])
    assert prefill(cache, again) == 32
    assert table(cache, again) == [1, 2, 4]


def test_invariant_10_touch_then_second_release_goes_to_tail_classic():
    cache = make(num_blocks=6, order="classic")
    a, c = S("a", BASE[:17]), S("c", range(7000, 7017))
    prefill(cache, a)
    free(cache, a)
    prefill(cache, c)
    free(cache, c)
    assert queue(cache) == [5, 2, 1, 4, 3]
    b = S("b", BASE[:17])
    assert prefill(cache, b) == 16 and table(cache, b) == [1, 5]
    free(cache, b)
    assert queue(cache) == [2, 4, 3, 5, 1]


def test_invariant_11_lazy_eviction_pops_exactly_its_entry():
    cache = make(num_blocks=4)
    a, b = S("a", BASE[:32]), S("b", BASE[:32])
    prefill(cache, a)
    prefill(cache, b)  # table [1, 3]; key1 -> {2, 3}
    key1 = cache.manager.block_keys(a)[1]
    free(cache, a)
    free(cache, b)
    m = cache.pool.cached_block_hash_to_block
    assert cache.match(S("p", BASE[:33])).num_tokens == 32  # freed, still hittable
    assert queue(cache) == [2, 3, 1]
    first = cache.pool.blocks[2]
    assert first.block_hash == key1
    assert [x.block_id for x in cache.pool.get_new_blocks(1)] == [2]
    assert first.block_hash is None
    assert [x.block_id for x in m.get_all_blocks(key1)] == [3]
    assert cache.stats().num_evictions == 1


def test_invariant_12_free_count_includes_cached_blocks():
    for n, expect in ((64, 48), (80, None)):
        cache = make(num_blocks=5)
        a = S("a", BASE[:48])
        prefill(cache, a)
        free(cache, a)
        assert cache.pool.get_num_free_blocks() == 4 and cache.pool.num_free_cached == 3
        big = S("big", BASE[:48] + list(range(9000, 9000 + n - 48)))
        assert prefill(cache, big) == expect
        if expect is not None:
            assert table(cache, big) == [1, 2, 3, 4] and cache.pool.get_num_free_blocks() == 0


@pytest.mark.parametrize("must_fit", [False, True])
def test_invariant_13_atomic_failure(must_fit):
    cache = make(num_blocks=5)
    a = S("a", BASE[:48])
    prefill(cache, a)
    free(cache, a)
    before_q, before_refs = queue(cache), [b.ref_cnt for b in cache.pool.blocks]
    big = S("big", BASE[:48] + list(range(9000, 9032)))
    blocks, hit = cache.manager.get_computed_blocks(big)
    assert (
        cache.manager.allocate_slots(big, 80 - hit, hit, blocks, full_sequence_must_fit=must_fit)
        is None
    )
    assert queue(cache) == before_q and [b.ref_cnt for b in cache.pool.blocks] == before_refs
    assert table(cache, big) == []
    cache.check_integrity()


def test_invariant_14_usage():
    cache = make(num_blocks=11)
    prefill(cache, S("a", BASE[:64]))
    assert cache.manager.get_usage() == pytest.approx(0.4)
    assert cache.usage().protected == 64 and cache.usage().available == 96


def test_invariant_15_reset():
    cache = make()
    a = S("a", BASE[:40])
    prefill(cache, a)
    assert cache.reset() is False
    free(cache, a)
    assert cache.reset() is True
    assert len(cache.pool.cached_block_hash_to_block) == 0
    assert cache.manager.prefix_cache_stats.reset
    assert prefill(cache, S("b", BASE[:40])) == 0


def test_invariant_16_caching_disabled():
    cache = make(enabled=False)
    for i in range(3):
        s = S(f"r{i}", BASE[:64])
        assert cache.match(s).num_tokens == 0 and prefill(cache, s) == 0
    assert all(b.block_hash is None for b in cache.pool.blocks)
    assert len(cache.pool.cached_block_hash_to_block) == 0 and cache.stats().requests == 0


def test_invariant_17_prompt_logprobs():
    cache = make()
    prefill(cache, S("a", BASE[:40]))
    lp = S("lp", BASE[:40], skip_cache_read=True)
    assert prefill(cache, lp) == 0
    lp2 = S("lp2", BASE[100:140], skip_cache_read=True)
    prefill(cache, lp2)  # still written to the cache for others
    assert prefill(cache, S("c", BASE[100:140])) == 32
    st = cache.stats()
    assert (st.requests, st.queries, st.hits) == (2, 80, 32)


def test_invariant_18_cache_salt():
    cache = make()
    tokens = BASE[:40]
    assert prefill(cache, S("1", tokens, salt="t1")) == 0
    assert prefill(cache, S("2", tokens, salt="t2")) == 0
    assert prefill(cache, S("3", tokens, salt="t1")) == 32
    assert prefill(cache, S("4", tokens)) == 0
    assert block_extra_keys(0, None, "t1") == ("t1",) and block_extra_keys(1, None, "t1") is None
    salted = cache.manager.block_keys(S("x", tokens, salt="t1"))
    plain = cache.manager.block_keys(S("y", tokens))
    assert all(s != p for s, p in zip(salted, plain))


def test_invariant_19_hash_formula():
    cache = make()  # sha256, none_hash_seed="0"
    t = BASE[:32]
    pk = lambda o: pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL)
    none_hash = hashlib.sha256(pk("0")).digest()
    assert cache.manager.hasher.none_hash == none_hash
    h0 = hashlib.sha256(pk((none_hash, tuple(t[0:16]), None))).digest()
    h1 = hashlib.sha256(pk((h0, tuple(t[16:32]), None))).digest()
    keys = cache.manager.block_keys(S("a", t))
    assert keys == [h0 + b"\x00\x00\x00\x00", h1 + b"\x00\x00\x00\x00"] and len(keys[0]) == 36


def test_invariant_20_generated_tokens_hashed_final_token_never_cached():
    cache = make(bs=4)
    a = S("a", BASE[:6], max_new=2)
    prefill(cache, a)
    decode(cache, a, 77)  # first sampled token is scheduled
    a.token_ids.append(78)  # final sampled token: never scheduled
    assert a.num_tokens == 8 and a.num_computed_tokens == 7
    assert len(cache.manager.block_keys(a)) == 2
    assert cache.manager.num_cached_block[a.seq_id] == 1
    free(cache, a)
    assert prefill(cache, S("b", BASE[:6] + [77, 78, 79])) == 4


def test_invariant_21_preemption_and_resume_stats():
    cache = make()
    a = S("a", BASE[:20], max_new=100)
    prefill(cache, a)
    for i in range(15):
        decode(cache, a, 3000 + i) if i < 14 else a.token_ids.append(3000 + i)
    assert a.num_tokens == 35
    cache.manager.free(a)  # preemption: same free path
    a.num_computed_tokens, a.num_preemptions, a.status = 0, 1, SeqStatus.PREEMPTED
    assert prefill(cache, a) == 32
    st = cache.stats()
    assert (st.requests, st.queries) == (1, 20)
    assert (st.preempted_requests, st.preempted_queries, st.preempted_hits) == (1, 35, 32)


def test_invariant_22_chunked_prefill():
    cache = make()
    a = S("a", BASE[:64])
    assert cache.manager.allocate_slots(a, 20) is not None  # first 20-token chunk
    assert cache.manager.num_cached_block["a"] == 1
    assert prefill(cache, S("b", BASE[:64])) == 16


def _trace_12b(stats_timing):
    cache = make(num_blocks=5, stats_timing=stats_timing)
    a = S("a", BASE[:48])
    prefill(cache, a)
    free(cache, a)
    assert prefill(cache, S("big", BASE[:48] + list(range(9000, 9032)))) is None
    return cache.stats()


def test_invariant_23_statistics():
    for order in ("classic", "v024"):
        st = _design_doc_trace(order)[0].stats()
        assert (st.requests, st.queries, st.hits) == (3, 58, 20)
    lookup = _trace_12b("lookup")
    assert (lookup.requests, lookup.queries, lookup.hits) == (2, 128, 48)
    admission = _trace_12b("admission")
    assert (admission.requests, admission.queries, admission.hits) == (1, 48, 0)


# ---- 24-28: traces and queue rules ----------------------------------------------------------
def _design_doc_trace(order):
    cache = make(num_blocks=11, bs=4, order=order)
    p0 = list(range(100, 115))
    r0 = S("r0", p0, max_new=3)
    assert prefill(cache, r0) == 0 and table(cache, r0) == [1, 2, 3, 4]
    assert [b.block_hash is not None for b in cache.manager.get_blocks(r0)] == [
        True,
        True,
        True,
        False,
    ]
    decode(cache, r0, 500)  # block 4 fills and is cached
    assert cache.manager.get_blocks(r0)[3].block_hash is not None
    decode(cache, r0, 501)  # block 5 allocated, partial
    assert table(cache, r0) == [1, 2, 3, 4, 5]
    r1 = S("r1", p0[:10] + [900, 901, 902, 903])
    assert prefill(cache, r1) == 8 and table(cache, r1) == [1, 2, 6, 7]
    free(cache, r0)
    free(cache, r1)
    before = queue(cache)
    r2 = S("r2", p0[:12] + list(range(800, 817)))
    evictions = cache.stats().num_evictions
    assert prefill(cache, r2) == 12
    return cache, before, table(cache, r2), cache.stats().num_evictions - evictions, queue(cache)


def test_invariant_24_design_doc_trace_classic():
    cache, before, t2, evicted, rest = _design_doc_trace("classic")
    assert before == [8, 9, 10, 5, 4, 3, 7, 6, 2, 1]
    assert t2 == [1, 2, 3, 8, 9, 10, 5, 4]
    assert evicted == 1 and cache.pool.blocks[4].block_hash is None  # request 0's 4th block
    assert rest == [7, 6]


def test_invariant_25_design_doc_trace_v024():
    _, before, t2, evicted, rest = _design_doc_trace("v024")
    assert before == [7, 5, 8, 9, 10, 4, 3, 6, 2, 1]
    assert t2 == [1, 2, 3, 7, 5, 8, 9, 10]
    assert evicted == 0
    assert rest == [4, 6]


@pytest.mark.parametrize(
    "order,after,req2_new,miss",
    [
        ("classic", [6, 7, 8, 9, 10, 4, 5, 3, 2, 1], [6], [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]),
        ("v024", [5, 4, 6, 7, 8, 9, 10, 3, 2, 1], [5], [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]),
    ],
)
def test_invariant_26_upstream_test_prefill_trace(order, after, req2_new, miss):
    cache = make(num_blocks=11, order=order)
    common = list(range(48))
    reqs = [
        S(f"r{i}", common + list(range(100 * (i + 1), 100 * (i + 1) + u)))
        for i, u in enumerate((7, 5, 6))
    ]
    assert prefill(cache, reqs[0]) == 0 and table(cache, reqs[0]) == [1, 2, 3, 4]
    assert prefill(cache, reqs[1]) == 48 and table(cache, reqs[1]) == [1, 2, 3, 5]
    free(cache, reqs[0])
    free(cache, reqs[1])
    assert queue(cache) == after
    assert prefill(cache, reqs[2]) == 48 and table(cache, reqs[2])[3:] == req2_new
    free(cache, reqs[2])
    big = S("big", range(20000, 20160))
    assert prefill(cache, big) == 0 and table(cache, big) == miss


@pytest.mark.parametrize(
    "order,expected,next_id", [("classic", [3, 4, 5, 2, 1], 3), ("v024", [2, 3, 4, 5, 1], 2)]
)
def test_invariant_27_v024_puts_hashless_blocks_first(order, expected, next_id):
    cache = make(num_blocks=6, order=order)
    a = S("a", BASE[:20])
    prefill(cache, a)
    free(cache, a)
    assert queue(cache) == expected
    assert cache.pool.get_new_blocks(1)[0].block_id == next_id


def test_invariant_28_null_block():
    cache = make(num_blocks=6)
    assert 0 not in queue(cache)
    assert [b.block_id for b in cache.pool.get_new_blocks(5)] == [1, 2, 3, 4, 5]
    assert cache.pool.null_block.block_hash is None and cache.pool.null_block.is_null


# ---- 29-30: accounting and ancestor closure (deterministic runs; hypothesis in test_apc_fuzz) --
def _random_run(order, seed, num_ops=400):
    rng = random.Random(seed)
    cache = make(num_blocks=40, bs=4, order=order, debug=True)
    bases = [[rng.randrange(50) for _ in range(40)] for _ in range(4)]
    live: list[Sequence] = []
    for op in range(num_ops):
        r = rng.random()
        if r < 0.4 or not live:
            base = rng.choice(bases)
            toks = base[: rng.randrange(1, 30)] + [
                rng.randrange(50) for _ in range(rng.randrange(0, 6))
            ]
            s = S(f"s{op}", toks, salt=rng.choice([None, None, "t"]))
            if prefill(cache, s) is not None:
                live.append(s)
        elif r < 0.75:
            s = rng.choice(live)
            if cache.manager.allocate_slots(s, 1) is not None:  # the slot for its next token
                s.token_ids.append(rng.randrange(50))
                s.num_computed_tokens += 1
        else:
            free(cache, live.pop(rng.randrange(len(live))))
        cache.check_integrity()
    return cache


def test_invariant_29_accounting():
    cache = _random_run("v024", 1)
    cache.check_integrity()
    blk = cache.pool.blocks[1]
    blk.ref_cnt += 1
    with pytest.raises(CacheIntegrityError):
        cache.check_integrity()


@pytest.mark.parametrize("order", ["classic", "v024"])
def test_invariant_30_ancestor_closure(order):
    total_evictions = 0
    for seed in range(12):
        cache = _random_run(order, seed)
        cache.check_ancestor_closure()
        total_evictions += cache.stats().num_evictions
    assert total_evictions > 300


# ---- 31-32: through the scheduler contract --------------------------------------------------
def _step(adm: ApcAdmission, waiting: deque, running: list, budget: StepBudget, next_token):
    plan = adm.schedule(waiting, running, budget)
    finished = []
    for item in plan.scheduled:
        seq = item.seq
        seq.num_computed_tokens = item.end
        if item.end == seq.num_tokens:
            seq.token_ids.append(next_token(seq))
            if seq.done_generating:
                seq.status = SeqStatus.FINISHED
                finished.append(seq)
    running[:] = [s for s in running if s not in finished]
    adm.finish_step(plan, finished)
    adm.cache.check_integrity()
    return plan


@pytest.mark.parametrize("reserve", [True, False])
def test_invariant_31_whole_sequence_admission(reserve):
    cache = make(num_blocks=5)
    adm = ApcAdmission(cache, reserve_full_prompt=reserve)
    big, small = S("big", range(80)), S("small", range(500, 510))
    waiting, running = deque([big, small]), []
    plan = _step(adm, waiting, running, StepBudget(8, 16), lambda s: 1)
    if reserve:
        assert plan.scheduled == [] and list(waiting) == [big, small]
    else:
        assert [(x.seq.seq_id, x.num_new_tokens) for x in plan.scheduled] == [("big", 16)]
        assert table(cache, big) == [1]


@pytest.mark.parametrize("async_scheduling,cached_at_step", [(False, 2), (True, 3)])
def test_invariant_32_async_decode_caching(async_scheduling, cached_at_step):
    cache = make(bs=4)
    adm = ApcAdmission(cache, async_scheduling=async_scheduling)
    a = S("a", range(7), max_new=4)
    waiting, running = deque([a]), []
    tokens = iter(range(100, 110))
    cached = []
    for _ in range(3):
        _step(adm, waiting, running, StepBudget(8, 64), lambda s: next(tokens))
        cached.append(cache.manager.num_cached_block["a"])
    assert cached.index(2) + 1 == cached_at_step
    # If the first sampled token is the last, block 2 is never cached in either mode.
    cache = make(bs=4)
    adm = ApcAdmission(cache, async_scheduling=async_scheduling)
    b = S("b", range(7), max_new=1)
    waiting, running = deque([b]), []
    _step(adm, waiting, running, StepBudget(8, 64), lambda s: 100)
    assert b.is_finished and len(cache.pool.cached_block_hash_to_block) == 1
