"""ApcAdmission: vLLM V1's scheduler contract over the APC cache (docs/apc.md §5-§8)."""

from __future__ import annotations

from collections import deque

import pytest

from engines.cache import build_cache
from engines.cache.apc import ApcCache
from engines.config import EngineConfig
from engines.sched.base import StepBudget, build_scheduler
from engines.sched.vllm import VllmScheduler as ApcAdmission
from engines.sequence import SeqStatus, Sequence


def make(num_blocks=64, bs=16, **kw) -> ApcCache:
    return ApcCache(num_blocks, bs, none_hash_seed="0")


def S(seq_id, tokens, max_new=1) -> Sequence:
    return Sequence(seq_id, list(tokens), len(tokens), max_new)


class Driver:
    """The scheduler's loop in miniature: schedule, advance, append a token, finish."""

    def __init__(self, adm: ApcAdmission, budget: StepBudget) -> None:
        self.adm, self.budget = adm, budget
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._next = 10_000

    def step(self, budget: StepBudget | None = None):
        plan = self.adm.schedule(self.waiting, self.running, budget or self.budget)
        finished = []
        for item in plan.scheduled:
            seq = item.seq
            seq.num_computed_tokens = item.end
            if item.end == seq.num_tokens:
                self._next += 1
                seq.token_ids.append(self._next)
                if seq.done_generating:
                    seq.status = SeqStatus.FINISHED
                    finished.append(seq)
        self.running[:] = [s for s in self.running if s not in finished]
        self.adm.finish_step(plan, finished)
        self.adm.cache.check_integrity()
        return plan


def _sched(plan):
    return [(x.seq.seq_id, x.start, x.num_new_tokens) for x in plan.scheduled]


def test_parallel_children_hit_in_the_same_step():
    cache = make()
    d = Driver(ApcAdmission(cache), StepBudget(8, 1024))
    kids = [S(f"{i}_p", range(100)) for i in range(4)]
    d.waiting.extend(kids)
    plan = d.step()
    assert _sched(plan) == [("0_p", 0, 100), ("1_p", 96, 4), ("2_p", 96, 4), ("3_p", 96, 4)]
    assert [k.num_cached_tokens for k in kids] == [0, 96, 96, 96]
    st = cache.stats()
    assert (st.requests, st.queries, st.hits) == (4, 400, 288)


def test_preemption_to_front_and_resume_invariant_21():
    cache = make(num_blocks=6)
    d = Driver(ApcAdmission(cache), StepBudget(8, 64))
    a, x = S("a", range(18), max_new=16), S("x", range(500, 520), max_new=100)
    d.waiting.extend([a, x])
    d.step()
    for _ in range(14):
        d.step()
    w = S("w", range(900, 905))
    d.waiting.append(w)
    plan = d.step()  # step 16: a needs a 3rd block, x (last running) is preempted
    assert plan.preempted == [x] and list(d.waiting) == [x, w]
    assert x.status is SeqStatus.PREEMPTED and x.num_computed_tokens == 0 and x.num_preemptions == 1
    assert x.num_tokens == 35 and d.running == []  # a finished in this step
    assert _sched(plan) == [("a", 32, 1)]  # nothing admitted after a preemption
    assert a.is_finished
    plan = d.step()
    assert _sched(plan)[:1] == [("x", 32, 3)]
    assert x.num_cached_tokens == 0 and x.num_recomputed_tokens == 2
    st = cache.stats()
    assert (st.preempted_requests, st.preempted_queries, st.preempted_hits) == (1, 35, 32)


def test_head_of_line_blocking():
    cache = make(num_blocks=5)
    d = Driver(ApcAdmission(cache, reserve_full_prompt=False), StepBudget(8, 64))
    r = S("r", range(32), max_new=50)
    d.waiting.append(r)
    d.step()
    big, small = S("big", range(600, 640)), S("small", range(700, 705))
    d.waiting.extend([big, small])
    plan = d.step()
    assert _sched(plan) == [("r", 32, 1)] and list(d.waiting) == [big, small]


def test_chunked_prefill_through_admission_invariant_22():
    cache = make()
    d = Driver(ApcAdmission(cache), StepBudget(8, 20))
    a = S("a", range(64), max_new=2)
    d.waiting.append(a)
    assert _sched(d.step()) == [("a", 0, 20)]
    assert cache.manager.num_cached_block["a"] == 1
    assert cache.match(S("probe", range(64))).num_tokens == 16
    d.step()  # second chunk: tokens [20, 40) complete block 2
    assert cache.manager.num_cached_block["a"] == 2
    assert cache.match(S("probe", range(64))).num_tokens == 32
    b = S("b", range(64))
    d.waiting.append(b)
    plan = d.step(StepBudget(8, 64))  # a's last chunk is allocated (and cached) before b's lookup
    assert _sched(plan) == [("a", 40, 24), ("b", 48, 16)]
    assert b.num_cached_tokens == 48


def test_budget_is_shared_and_steps_mix_decode_and_prefill():
    cache = make()
    d = Driver(ApcAdmission(cache), StepBudget(8, 40))
    a = S("a", range(30), max_new=5)
    d.waiting.append(a)
    d.step()
    b = S("b", range(200, 300))
    d.waiting.append(b)
    assert _sched(d.step()) == [("a", 30, 1), ("b", 0, 39)]


def test_max_num_seqs():
    cache = make()
    d = Driver(ApcAdmission(cache), StepBudget(2, 1024))
    d.waiting.extend(S(f"r{i}", range(i * 100, i * 100 + 10), max_new=3) for i in range(3))
    plan = d.step()
    assert [x.seq.seq_id for x in plan.scheduled] == ["r0", "r1"] and len(d.waiting) == 1


def test_lpm_orders_by_uncapped_match_with_fallback():
    for fallback, expected in ((128, ["p", "u"]), (1, ["u", "p"])):
        cache = make()
        d = Driver(
            ApcAdmission(cache, policy="lpm", lpm_fallback_queue_len=fallback), StepBudget(8, 1024)
        )
        d.waiting.append(S("prime", range(48)))
        d.step()
        d.waiting.extend([S("u", range(5000, 5048)), S("p", range(48))])
        plan = d.step()
        assert [x.seq.seq_id for x in plan.scheduled] == expected


def test_dfs_weight_orders_by_the_hash_chain_tree():
    # SGLang's dfs-weight (docs/radix.md §8.4) over APC's implicit tree (B = 4). Cached: X = 0..11
    # (blocks k0 k1 k2) and Y = 100..107 (y0 y1). Waiting requests sit at their last hit block:
    #   root ── k0 ── k1 {w1, w4} ── k2 {w2}      weight 3
    #    │└─── y0 ── y1 {w3}                        weight 1
    #    └ {w5}
    # Post-order, heavier subtree first, a node's requests after its children, root last.
    cache = ApcCache(64, 4, none_hash_seed="0")
    d = Driver(ApcAdmission(cache, policy="dfs-weight"), StepBudget(8, 1024))
    x, y = list(range(12)), list(range(100, 108))
    d.waiting.extend([S("x", x), S("y", y)])
    d.step()
    d.waiting.extend(
        [
            S("w1", x[:8] + [900, 901, 902, 903]),
            S("w2", x + [910, 911, 912, 913]),
            S("w3", y + [920, 921, 922, 923]),
            S("w4", x[:8] + [930, 931, 932, 933]),
            S("w5", list(range(5000, 5012))),
        ]
    )
    plan = d.step()
    assert [item.seq.seq_id for item in plan.scheduled] == ["w2", "w1", "w4", "w3", "w5"]


def test_unknown_policy_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid: dfs-weight, fcfs, lpm"):
        ApcAdmission(make(), policy="sjf")


@pytest.mark.parametrize("order,default", [("v024", True), ("classic", False)])
def test_factory_options_follow_free_order(order, default):
    adm = build_scheduler(EngineConfig(free_order=order, block_size=16, kv_capacity_tokens=160))
    cache = adm.cache
    assert isinstance(cache, ApcCache) and cache.num_blocks == 11 and cache.enabled
    assert adm.reserve_full_prompt is default and adm.async_scheduling is default
    assert cache.pool.free_order == order
    adm = build_scheduler(
        EngineConfig(
            free_order=order, reserve_full_prompt=not default, async_scheduling=not default
        )
    )
    assert adm.reserve_full_prompt is (not default) and adm.async_scheduling is (not default)
    cache = build_cache(EngineConfig(prefix_caching=False))
    assert not cache.enabled and cache.manager.hasher is None


def test_finished_sequences_are_released():
    cache = make()
    d = Driver(ApcAdmission(cache), StepBudget(8, 1024))
    a = S("a", range(40), max_new=2)
    d.waiting.append(a)
    d.step()
    d.step()
    assert a.is_finished and cache.block_table(a) == [] and cache.usage().protected == 0
