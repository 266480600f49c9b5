"""Hypothesis fuzz of the APC cache: >= 10,000 random operations in total (allocate, chunked
prefill, decode, free, preempt/resume, n > 1 children, salts, prompt-logprobs, reset; both free
orders), checking invariant 29 (accounting) and 30 (ancestor closure) after every operation, on
the pool's C loops and on their Python reference (engines/cache/apc/pool_loops.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.cache.apc import ApcCache, pool_loops
from engines.sequence import Sequence

NUM_EXAMPLES = 60
OPS = st.lists(
    st.tuples(st.sampled_from("aaagggddfppcr"), st.integers(0, 2**16)), min_size=150, max_size=250
)


class World:
    def __init__(self, order: str, must_fit: bool) -> None:
        self.cache = ApcCache(40, 4, free_order=order, none_hash_seed="0", debug=True)
        self.m = self.cache.manager
        self.must_fit = must_fit
        self.live: list[Sequence] = []  # holding blocks
        self.parked: list[Sequence] = []  # preempted, waiting to resume
        self.bases = [[(7 * b + i) % 11 for i in range(48)] for b in range(3)]
        self.ids = 0

    def new_seq(self, x: int) -> list[Sequence]:
        base = self.bases[x % 3]
        prompt = base[: 1 + (x >> 2) % 40] + [50 + (x >> 8) % 5] * ((x >> 4) % 4)
        salt = (None, None, "s")[(x >> 6) % 3]
        n = 1 + (x >> 10) % 3  # n > 1: children share the prompt through the cache
        out = []
        for _ in range(n):
            self.ids += 1
            out.append(
                Sequence(
                    f"q{self.ids}",
                    list(prompt),
                    len(prompt),
                    50,
                    salt=salt,
                    skip_cache_read=(x >> 12) % 9 == 0,
                )
            )
        return out

    def admit(self, seq: Sequence, x: int) -> bool:
        blocks, hit = self.m.get_computed_blocks(seq)
        chunk = max(1, min(seq.num_tokens - hit, 1 + x % 24))
        if (
            self.m.allocate_slots(seq, chunk, hit, blocks, full_sequence_must_fit=self.must_fit)
            is None
        ):
            return False
        self.m.record_admission(seq, hit)
        seq.num_computed_tokens = hit + chunk
        self.live.append(seq)
        return True

    def grow(self, seq: Sequence, x: int) -> None:
        if seq.num_computed_tokens == seq.num_tokens:  # the step sampled a token: decode it
            seq.token_ids.append(x % 11)
        num_new = min(seq.num_tokens - seq.num_computed_tokens, 1 + x % 9)
        if self.m.allocate_slots(seq, num_new) is not None:
            seq.num_computed_tokens += num_new

    def apply(self, op: str, x: int) -> None:
        if op == "a":
            for seq in self.new_seq(x):
                self.admit(seq, x)
        elif op == "g" and self.live:
            self.grow(self.live[x % len(self.live)], x >> 3)
        elif op in "df" and self.live:
            self.cache.release(self.live.pop(x % len(self.live)), finished=True)
        elif op == "p" and self.live:
            seq = self.live.pop(x % len(self.live))
            self.m.free(seq)
            seq.num_computed_tokens, seq.num_preemptions = 0, seq.num_preemptions + 1
            self.parked.append(seq)
        elif op == "c" and self.parked:
            seq = self.parked[x % len(self.parked)]
            if self.admit(seq, x):
                self.parked.remove(seq)
        elif op == "r":
            ok = self.cache.reset()
            assert ok == (not self.live), "reset must succeed exactly when nothing is held"


@pytest.mark.parametrize("loops", ["native", "python"])
def test_fuzz_accounting_and_ancestor_closure(loops, monkeypatch):
    if loops == "native" and pool_loops.NATIVE is None:
        pytest.skip("_pool_loops is not built here")
    if loops == "python":
        monkeypatch.setattr(pool_loops, "NATIVE", None)
    expected = pool_loops.NATIVE or pool_loops.PYTHON
    counts = {"ops": 0, "evictions": 0}

    @settings(max_examples=NUM_EXAMPLES, deadline=None, derandomize=True)
    @given(order=st.sampled_from(["classic", "v024"]), must_fit=st.booleans(), ops=OPS)
    def run(order, must_fit, ops):
        world = World(order, must_fit)
        assert world.cache.pool.loops is expected
        for op, x in ops:
            world.apply(op, x)
            world.cache.check_integrity()  # invariants 29 and (debug=True) 30
            counts["ops"] += 1
        counts["evictions"] += world.cache.stats().num_evictions
        for seq in world.live:
            world.cache.release(seq, finished=True)
        world.cache.check_integrity()
        assert world.cache.usage().protected == 0

    run()
    assert counts["ops"] >= 10_000
    assert counts["evictions"] > 1000
