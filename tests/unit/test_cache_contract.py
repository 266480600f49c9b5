"""The cache/scheduler contract (engines/cache/protocol.py, engines/sched/base.py), once, for every
registered cache.

Design-neutral: only protocol methods are used, through a tiny driver that plays the generic
scheduler's part. Granularity g is the cache's block_size (APC block, radix page).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from engines.cache import DESIGNS, build_cache
from engines.cache.protocol import (
    BlockTables,
    CacheBookkeeping,
    DecodeRunAllocation,
    KVOwner,
    PrefixCache,
    PrefixOrder,
    RecencyRefresh,
    ReuseIndex,
)
from engines.config import EngineConfig
from engines.sched.base import StepBudget, build_scheduler
from engines.sequence import SeqStatus, Sequence

BUDGET = StepBudget(max_num_seqs=16, max_num_batched_tokens=256)
PROMPT = list(range(1000, 1100))  # 100 tokens


def _config(name: str, **kw: Any) -> EngineConfig:
    base: dict[str, Any] = dict(
        cache=name,
        block_size=DESIGNS.get(name).block_size,
        kv_capacity_tokens=4096,
        debug_checks=True,
        overlap=False,  # the driver plays a loop that processes each step's result at once
    )
    base.update(kw)
    return EngineConfig(**base)


class Driver:
    def __init__(self, config: EngineConfig) -> None:
        self.adm = build_scheduler(config)
        self.cache = self.adm.cache
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._ids = 0

    def submit(self, prompt, max_new=2, salt=None) -> Sequence:
        self._ids += 1
        out = tuple(90_000 + 100 * self._ids + i for i in range(max_new))  # never shared
        seq = Sequence(
            f"r{self._ids}", list(prompt), len(prompt), max_new, salt=salt, scripted_output_ids=out
        )
        self.waiting.append(seq)
        return seq

    def step(self) -> None:
        plan = self.adm.schedule(self.waiting, self.running, BUDGET)
        finished = []
        for item in plan.scheduled:
            seq = item.seq
            seq.num_computed_tokens = item.end
            if item.end == seq.num_tokens:
                assert seq.scripted_output_ids is not None  # submit scripts every reply
                seq.token_ids.append(seq.scripted_output_ids[seq.num_output_tokens])
                if seq.done_generating:
                    seq.status = SeqStatus.FINISHED
                    finished.append(seq)
        self.running[:] = [s for s in self.running if s not in finished]
        self.adm.finish_step(plan, finished)
        self.check()

    def check(self) -> None:
        self.cache.check_integrity()
        u = self.cache.usage()
        assert (
            u.capacity
            == self.cache.capacity_tokens
            == (self.cache.num_blocks - 1) * self.cache.block_size
        )
        assert min(u.available, u.evictable, u.protected) >= 0
        assert u.available + u.protected <= u.capacity <= u.available + u.evictable + u.protected
        bs = self.cache.block_size
        for seq in self.running:
            assert len(self.cache.block_table(seq)) * bs >= seq.num_computed_tokens

    def run(self, max_steps=500) -> None:
        for _ in range(max_steps):
            if not (self.waiting or self.running):
                return
            self.step()
        raise AssertionError("driver did not drain")

    def serve(self, prompt, **kw) -> Sequence:
        seq = self.submit(prompt, **kw)
        self.run()
        assert seq.is_finished
        return seq


def _aligned(n: int, g: int) -> int:
    return g * (n // g)


@pytest.fixture(params=DESIGNS.names())
def name(request):
    return request.param


@pytest.mark.parametrize("enabled", [True, False], ids=["enabled", "disabled"])
def test_cache_implements_the_protocols_it_declares(name, enabled):
    cache = build_cache(_config(name, prefix_caching=enabled))
    assert cache.name == name and cache.enabled is enabled
    for core in (ReuseIndex, KVOwner, BlockTables, CacheBookkeeping, PrefixCache):
        assert isinstance(cache, core) and core in type(cache).__mro__  # declared as a base
    # the capabilities beyond PrefixCache are optional: a cache has exactly those it declares
    for capability in (DecodeRunAllocation, PrefixOrder, RecencyRefresh):
        assert isinstance(cache, capability) is (capability in type(cache).__mro__)


@pytest.mark.parametrize(
    "second",
    [
        PROMPT,
        PROMPT[:50] + list(range(5000, 5030)),
        PROMPT + list(range(6000, 6020)),
        PROMPT[:10] + [7] * 40,
    ],
    ids=["repeat", "half", "extend", "short"],
)
def test_repeated_prompt_reuses_aligned_min_lcp(name, second):
    d = Driver(_config(name))
    d.serve(PROMPT)
    lcp = next(
        (i for i, (a, b) in enumerate(zip(PROMPT, second)) if a != b), min(len(PROMPT), len(second))
    )
    seq = d.serve(second)
    assert seq.num_cached_tokens == _aligned(min(lcp, len(second) - 1), d.cache.block_size)
    assert d.cache.usage().protected == 0


def test_salts_isolate(name):
    d = Driver(_config(name))
    g = d.cache.block_size
    assert d.serve(PROMPT, salt="t1").num_cached_tokens == 0
    assert d.serve(PROMPT, salt="t2").num_cached_tokens == 0
    assert d.serve(PROMPT).num_cached_tokens == 0
    assert d.serve(PROMPT, salt="t1").num_cached_tokens == _aligned(99, g)


def test_disabled_mode_reuses_nothing(name):
    d = Driver(_config(name, prefix_caching=False))
    assert not d.cache.enabled
    for _ in range(3):
        assert d.serve(PROMPT).num_cached_tokens == 0
    assert d.cache.match(Sequence("probe", list(PROMPT), 100, 1)).num_tokens == 0
    assert d.cache.usage().protected == 0


def test_concurrent_requests_keep_accounting_and_release_at_idle(name):
    d = Driver(_config(name))
    for i in range(6):
        d.submit(PROMPT[: 40 + 10 * i] + [i] * 5, max_new=3 + i)
    d.run()
    assert d.cache.usage().protected == 0
    st = d.cache.stats()
    assert st.hits <= st.queries and st.requests >= 1


def test_match_is_read_only_and_capped(name):
    d = Driver(_config(name))
    d.serve(PROMPT)
    before = d.cache.stats()
    probe = Sequence("probe", list(PROMPT), 100, 1)
    g = d.cache.block_size
    assert d.cache.match(probe).num_tokens == _aligned(99, g)
    assert d.cache.match(probe, capped=False).num_tokens >= _aligned(99, g)
    assert d.cache.stats() == before
    d.check()


def test_reset_refuses_while_held_and_zeroes_at_idle(name):
    d = Driver(_config(name))
    d.serve(PROMPT)
    seq = d.submit(PROMPT + [1, 2, 3], max_new=5)
    d.step()
    assert seq.status is SeqStatus.RUNNING and d.cache.usage().protected > 0
    assert d.cache.reset() is False
    d.check()
    d.run()
    assert d.cache.reset() is True
    st = d.cache.stats()
    assert (st.requests, st.queries, st.hits, st.num_evictions) == (0, 0, 0, 0)
    assert d.serve(PROMPT).num_cached_tokens == 0
