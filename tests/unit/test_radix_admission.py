"""SGLang's non-overlap scheduler over the radix cache (docs/radix.md §7-§9): the PrefillAdder
budget, head-of-line blocking, chunking, retraction, ratio decay, and the §9 optimality test."""

from __future__ import annotations

import itertools
import random
from collections import deque

import pytest

from engines.cache import DESIGNS, build_cache
from engines.cache.radix.hooks import match_request
from engines.cache.radix.key import RadixKey as K
from engines.cache.radix.recency import LogicalClock
from engines.cache.radix.schedule_policy import dfs_weight_order
from engines.cache.radix.tree import UnifiedRadixTree
from engines.cache.records import PrefixMatch
from engines.config import EngineConfig
from engines.registry import UnknownNameError
from engines.sched.base import StepBudget, build_scheduler
from engines.sched.prefill_adder import AddReqResult, PrefillAdder
from engines.sched.sglang import SglangScheduler as RadixAdmission
from engines.sequence import SeqStatus
from tests.radix_support import complete, drive, make_seq, new_cache, serve, step

BUDGET = StepBudget(max_num_seqs=8, max_num_batched_tokens=64)


def adder_for(cache, running=(), ratio=0.5, rem_input=16384, rem_chunk=64):
    return PrefillAdder(
        cache,
        list(running),
        ratio,
        rem_input,
        rem_chunk,
        4096,
    )


# -------------------------------------------------------------------- PrefillAdder (§7.2)
def test_rem_total_subtracts_running_reservations():
    cache = new_cache(capacity=200)
    serve(cache, make_seq("w", list(range(1, 21)), [0]))  # 20 evictable tokens
    running = make_seq("run", [5, 6], range(50))  # 50 new tokens to go, 10 generated
    running.token_ids.extend(range(10))
    adder = adder_for(cache, [running], ratio=0.5)
    assert adder.rem_total_tokens == 180 + 20 - 40 * 0.5
    assert adder.cur_rem_tokens == 200


def test_add_one_req_charges_extend_page_and_reservation():
    cache = new_cache(page_size=4, capacity=200)
    adder = adder_for(cache)
    seq = make_seq("a", list(range(1, 11)), range(30))  # extend 10 -> ceil 12
    assert adder.add_one_req(seq, PrefixMatch(0, cache.tree.root_node)) is AddReqResult.CONTINUE
    assert adder.rem_total_tokens == 200 - (12 + 4 + 30)
    assert adder.cur_rem_tokens == 200 - (12 + 4)
    assert (adder.rem_input_tokens, adder.rem_chunk_tokens) == (16384 - 12, 64 - 12)
    assert (adder.log_hit_tokens, adder.log_input_tokens) == (0, 10)


def test_no_token_when_the_demand_reaches_the_budget():
    cache = new_cache(capacity=50)
    adder = adder_for(cache)
    big = make_seq("big", list(range(1, 21)), range(29))  # 20 + 29 + 1 = 50 >= 50
    assert adder.add_one_req(big, PrefixMatch(0, cache.tree.root_node)) is AddReqResult.NO_TOKEN
    assert adder.can_run_list == [] and cache.tree.protected_size() == 0
    fits = make_seq(
        "fits", list(range(1, 21)), range(28)
    )  # 49 < 50: admitted, then the budget is 1
    assert adder.add_one_req(fits, PrefixMatch(0, cache.tree.root_node)) is AddReqResult.CONTINUE
    paged = new_cache(page_size=4, capacity=100)
    adder2 = adder_for(paged, rem_chunk=None)
    adder2.rem_total_token_offset = 100 - 26  # 26 left; demand 1 + 20 + 4 = 25 fits
    last = make_seq("last", [7], range(20))  # charged ceil_4(1) + 4 + 20 = 28: the round ends
    assert adder2.add_one_req(last, PrefixMatch(0, paged.tree.root_node)) is AddReqResult.NO_TOKEN
    assert len(adder2.can_run_list) == 1


def test_temporary_lock_removes_the_matched_prefix_from_the_budget():
    cache = new_cache(capacity=40)
    serve(cache, make_seq("w", list(range(1, 21)), [0]))  # 20 evictable, 20 available
    seq = make_seq("r", list(range(1, 21)) + [99], range(18))
    match = match_request(cache.tree, seq)
    # total = 1 + 18 + 1 = 20: below available + evictable (40), not below 40 - 20 locked
    adder = adder_for(cache)
    assert (
        adder.add_one_req(seq, PrefixMatch(match.device_prefix_len, match.last_device_node))
        is AddReqResult.NO_TOKEN
    )
    assert cache.tree.protected_size() == 0  # the temporary lock is gone


def test_chunking_truncates_to_whole_pages_and_sets_the_chunked_request():
    cache = new_cache(page_size=4, capacity=400)
    adder = adder_for(cache, rem_chunk=10)
    seq = make_seq("long", list(range(1, 31)), [1])
    assert adder.add_one_req(seq, PrefixMatch(0, cache.tree.root_node)) is AddReqResult.CONTINUE
    assert adder.can_run_list[0].extend_len == 8 and adder.new_chunked_req is seq
    assert adder.rem_chunk_tokens == 2
    other = make_seq("other", list(range(50, 60)), [1])
    assert (
        adder.add_one_req(other, PrefixMatch(0, cache.tree.root_node)) is AddReqResult.OTHER
    )  # floor(2/4)*4 = 0
    assert len(adder.can_run_list) == 1


def test_continuing_chunk_takes_min_of_remaining_chunk_and_memory():
    cache = new_cache(capacity=100)
    seq = make_seq("c", list(range(1, 61)), [1])
    adder = adder_for(cache, rem_chunk=64)
    adder.rem_total_token_offset = 100 - 30
    assert adder.add_chunked_req(seq, 10) is seq  # 50 remaining > min(64, 30)
    assert adder.can_run_list[0].extend_len == 30
    adder = adder_for(cache, rem_chunk=64)
    adder.rem_total_token_offset = 200  # memory term not positive: the full chunk budget
    assert adder.add_chunked_req(seq, 10) is None  # 50 <= 64: the prompt finishes
    assert adder.can_run_list[0].extend_len == 50 and adder.log_hit_tokens == 0


# -------------------------------------------------------------- scheduling rounds (§7.1)
def test_head_of_line_blocking_under_fcfs():
    cache = new_cache(capacity=64)
    adm = RadixAdmission(cache, "fcfs")
    waiting, running = deque([make_seq("run", list(range(1, 11)), range(30))]), []
    step(adm, waiting, running, BUDGET)
    big = make_seq("big", list(range(100, 130)), range(10))  # 41 >= 54 - 29 * 0.7 for now
    small = make_seq("small", [200, 201], [1])  # would fit
    waiting.extend([big, small])
    plan, _ = step(adm, waiting, running, BUDGET)
    assert [i.seq.seq_id for i in plan.scheduled] == ["run"] and list(waiting) == [big, small]
    assert adm.batch_is_full  # no prefill round until the running batch shrinks
    for _ in range(5):
        plan, _ = step(adm, waiting, running, BUDGET)
        assert [i.seq.seq_id for i in plan.scheduled] == ["run"]
    never = RadixAdmission(new_cache(capacity=64), "fcfs")
    waiting = deque([make_seq("huge", list(range(1, 41)), range(30)), small])  # 71 >= 64
    plan, _ = step(never, waiting, [], BUDGET)
    assert plan.scheduled == [] and [s.seq_id for s in waiting] == ["huge", "small"]


def test_running_limit_and_batch_is_full():
    cache = new_cache(capacity=400)
    adm = RadixAdmission(cache, "fcfs")
    seqs = [make_seq(f"r{i}", [100 * i + k for k in range(5)], [1, 2, 3]) for i in range(3)]
    waiting, running = deque(seqs), []
    limit = StepBudget(max_num_seqs=2, max_num_batched_tokens=64)
    plan, _ = step(adm, waiting, running, limit)
    assert [item.seq.seq_id for item in plan.scheduled] == ["r0", "r1"]
    plan, _ = step(adm, waiting, running, limit)  # 2 running: no prefill round, a decode
    assert [(i.seq.seq_id, i.num_new_tokens) for i in plan.scheduled] == [("r0", 1), ("r1", 1)]
    assert adm.batch_is_full and [s.seq_id for s in waiting] == ["r2"]


def test_prefill_and_decode_never_mix_and_chunks_go_first():
    cache = new_cache(capacity=512)
    adm = RadixAdmission(cache, "fcfs")
    rng = random.Random(3)
    seqs = [
        make_seq(
            f"r{i}",
            [rng.randrange(50) for _ in range(rng.randrange(5, 70))],
            range(rng.randrange(1, 6)),
        )
        for i in range(12)
    ]
    waiting, running = deque(seqs), []
    budget = StepBudget(max_num_seqs=4, max_num_batched_tokens=32)
    while waiting or running:
        chunked = adm.chunked
        plan = adm.schedule(waiting, running, budget)
        decoding = [item.seq in adm.batch for item in plan.scheduled]
        assert all(decoding) or not any(decoding)  # one kind per step
        if any(decoding):
            assert all(item.num_new_tokens == 1 for item in plan.scheduled)
        else:
            assert plan.num_tokens <= 32
        if chunked is not None:
            assert (
                plan.scheduled[0].seq is chunked
                and plan.scheduled[0].start == cache.reqs[chunked.seq_id].prefix_len
            )
        complete(adm, plan, running)
        cache.check_integrity()
    assert all(s.num_output_tokens == s.max_new_tokens for s in seqs)


def test_cached_tokens_are_set_once_and_recomputation_is_counted():
    cache = new_cache(capacity=64)
    adm = RadixAdmission(cache, "fcfs", schedule_conservativeness=0.01)
    seqs = [make_seq(f"v{i}", range(20 * i, 20 * i + 10), range(100, 125)) for i in range(2)]
    plans = drive(adm, seqs, BUDGET)
    victim = seqs[1]
    assert victim.num_preemptions == 1 and victim.num_cached_tokens == 0
    assert victim.num_recomputed_tokens > 0
    assert cache.stats().preempted_requests == 1
    assert cache.stats().requests == 2 and cache.stats().hits == 0
    assert any(
        len(p.scheduled) == 1 and p.scheduled[0].seq is victim and p.scheduled[0].start == 10
        for p in plans
    )


def test_retraction_victims_order_status_and_ratio_reset():
    cache = new_cache(capacity=96)
    adm = RadixAdmission(cache, "fcfs", schedule_conservativeness=0.01)
    seqs = [
        make_seq("short_in", range(0, 8), range(100, 140)),
        make_seq("long_in", range(20, 40), range(100, 140)),
        make_seq("mid_in", range(50, 62), range(100, 140)),
    ]
    waiting, running = deque(seqs), []
    while not any(s.num_preemptions for s in seqs):
        step(adm, waiting, running, BUDGET)
    victims = [s for s in seqs if s.num_preemptions]
    assert victims[0].seq_id == "long_in"  # equal outputs: the longest input goes first
    for v in victims:
        assert v.status is SeqStatus.PREEMPTED and v.num_computed_tokens == 0 and v in waiting
        assert v not in running and v.seq_id not in cache.reqs
    assert list(waiting)[-len(victims) :] == victims
    kept = adm.batch
    decoded = sum(s.num_output_tokens - 1 for s in kept)  # each kept one decoded after retraction
    expected = min(1.0, (decoded + 20 * len(kept)) / (sum(s.max_new_tokens for s in kept) + 1))
    assert adm.new_token_ratio == pytest.approx(expected)
    cache.check_integrity()


def test_new_token_ratio_decays_per_decode_step():
    cache = new_cache(capacity=256)
    adm = RadixAdmission(cache, "fcfs")
    waiting, running = deque([make_seq("r", [1, 2, 3], range(10))]), []
    step(adm, waiting, running, BUDGET)  # prefill
    assert adm.new_token_ratio == pytest.approx(0.7)
    step(adm, waiting, running, BUDGET)
    step(adm, waiting, running, BUDGET)
    assert adm.new_token_ratio == pytest.approx(0.7 - 2 * (0.7 - 0.7 * 0.14) / 600)


def test_lpm_on_a_disabled_cache_behaves_as_fcfs():
    cache = new_cache(enabled=False)
    adm = RadixAdmission(cache, "lpm")
    waiting = deque([make_seq("a", [1, 2, 3]), make_seq("b", [1, 2, 3, 4])])
    adm.policy.calc_priority(waiting)
    assert [s.seq_id for s in waiting] == ["a", "b"] and adm.policy.last_matches == {}


def test_lpm_admits_the_longest_match_first():
    cache = new_cache(capacity=400)
    serve(cache, make_seq("w", list(range(1, 31)), [0]))
    adm = RadixAdmission(cache, "lpm")
    waiting, running = (
        deque(
            [make_seq("cold", [500, 501, 502], [1]), make_seq("hot", list(range(1, 31)) + [7], [1])]
        ),
        [],
    )
    plan, _ = step(adm, waiting, running, BUDGET)
    assert [(i.seq.seq_id, i.start) for i in plan.scheduled] == [("hot", 30), ("cold", 0)]


# ------------------------------------------------------------------- factory and config
def test_factory_builds_from_engine_config():
    cfg = EngineConfig(
        cache="radix",
        block_size=4,
        kv_capacity_tokens=64,
        policy="dfs-weight",
        eviction_policy="lfu",
    )
    adm = build_scheduler(cfg)
    cache = adm.cache
    assert "radix" in DESIGNS.names()
    assert (cache.page_size, cache.capacity_tokens, cache.tree.policy.name) == (4, 64, "lfu")
    assert adm.policy.name == "dfs-weight"
    off = build_cache(
        EngineConfig(cache="radix", block_size=1, kv_capacity_tokens=64, prefix_caching=False)
    )
    assert off.tree.disable and not off.enabled
    with pytest.raises(UnknownNameError, match="valid: dfs-weight, fcfs, lpm"):
        build_scheduler(
            EngineConfig(cache="radix", block_size=1, kv_capacity_tokens=64, policy="lof")
        )


# ------------------------------------------------------------- §9 the paper's Theorem 3.1
def _edge_sum(prompts):
    tree = UnifiedRadixTree(1, None, clock=LogicalClock())
    for p in prompts:
        tree.insert(K(p))
    return tree.total_size(), tree


def _computed_in_order(prompts_in_order, capacity):
    cache = new_cache(capacity=capacity)
    total = 0
    for i, prompt in enumerate(prompts_in_order):
        total += serve(cache, make_seq(f"r{i}", prompt, [0]), capped=False)  # test-only cap switch
        cache.check_integrity()
    return total


@pytest.mark.parametrize("seed", range(4))
def test_dfs_weight_order_computes_exactly_the_edge_sum(seed):
    rng = random.Random(seed)
    stems = [[rng.randrange(1000) for _ in range(rng.randrange(2, 12))] for _ in range(3)]
    prompts = []
    for _ in range(14):
        prompt = list(rng.choice(stems))
        for _ in range(rng.randrange(0, 3)):
            prompt += [rng.randrange(3) for _ in range(rng.randrange(1, 6))]
        prompts.append(prompt)
    edge_sum, batch_tree = _edge_sum(prompts)
    capacity = max(len(p) for p in prompts)
    seqs = [make_seq(f"q{i}", p) for i, p in enumerate(prompts)]
    matches = {s.seq_id: batch_tree.match_prefix(K(s.token_ids)) for s in seqs}
    matches = {k: type("M", (), {"last_node": m.last_device_node}) for k, m in matches.items()}
    order = dfs_weight_order(seqs, matches, set(), batch_tree.root_node)
    assert _computed_in_order([s.token_ids for s in order], capacity) == edge_sum
    for perm in itertools.islice(itertools.permutations(prompts), 0, 30, 7):  # no order does better
        assert _computed_in_order(list(perm), capacity) >= edge_sum
