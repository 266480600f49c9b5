"""Random operation sequences against the radix cache (docs/radix.md §2.8, §5.5, §12.6/8/14).

Operations: admit (match, lock, allocate), decode, checkpoint, finish (insert), retract, evict,
evict-for-alloc, match/touch, raw lock/unlock, reset. After every one:
evictable + protected == total and available + evictable + protected == capacity, plus the full
`check_integrity()` whenever no raw lock is held. 2 x 55 examples x 100 operations = 11,000.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engines.cache.radix.cache import RadixCache
from engines.cache.radix.hooks import (
    checkpoint,
    evict_to_free_tokens,
    match_request,
    prepare_decode,
    prepare_extend,
    start_request,
)
from engines.cache.radix.key import RadixKey
from engines.cache.radix.recency import LogicalClock
from engines.sequence import SeqStatus
from tests.radix_support import make_seq

OPS = [
    "admit",
    "admit",
    "decode",
    "decode",
    "checkpoint",
    "finish",
    "retract",
    "evict",
    "alloc_evict",
    "match",
    "lock",
    "unlock",
    "reset",
]
NUM_OPS = 100
STEMS = [[7, 3, 9, 1, 4, 4, 2, 8], [7, 3, 5], [6, 6, 6, 6, 1, 2]]


class Fuzzer:
    def __init__(self, page_size: int, policy: str) -> None:
        self.cache = RadixCache(
            page_size, 96, eviction_policy=policy, clock=LogicalClock(), max_num_reqs=12
        )
        self.live: dict[str, object] = {}
        self.locks: list = []
        self.num_seqs = 0

    def random_seq(self, rng: random.Random):
        prompt = list(rng.choice(STEMS))[: rng.randrange(1, 9)] + [
            rng.randrange(4) for _ in range(rng.randrange(0, 10))
        ]
        outputs = [rng.randrange(4) for _ in range(rng.randrange(1, 8))]
        self.num_seqs += 1
        return make_seq(
            f"s{self.num_seqs}",
            prompt,
            outputs,
            salt=rng.choice([None, None, "t"]),
            priority=rng.randrange(3),
        )

    def fits(self, tokens: int) -> bool:
        return self.cache.allocator.available_size() + self.cache.tree.evictable_size() >= tokens

    def admit(self, rng):
        cache, seq = self.cache, self.random_seq(rng)
        if not cache.req_to_token_pool.available_size():
            return
        match = match_request(cache.tree, seq)
        lock = cache.tree.lock(match.last_device_node)
        extend = seq.num_tokens - match.device_prefix_len
        if not self.fits(extend + 2 * cache.page_size):
            cache.tree.unlock(lock)
            return
        state = start_request(cache, seq, match.device_prefix_len, match.last_device_node, lock)
        prepare_extend(cache, [(seq, state, match.device_prefix_len, extend)])
        seq.token_ids.append(seq.scripted_output_ids[0])
        seq.status = SeqStatus.RUNNING
        self.live[seq.seq_id] = seq

    def decode(self, rng):
        seq = self.pick(rng)
        if seq is None or seq.done_generating or not self.fits(self.cache.page_size):
            return
        prepare_decode(self.cache, [self.cache.reqs[seq.seq_id]])
        seq.token_ids.append(seq.scripted_output_ids[seq.num_output_tokens])

    def checkpoint(self, rng):
        seq = self.pick(rng)
        if seq is not None:
            state = self.cache.reqs[seq.seq_id]
            checkpoint(self.cache, state, seq, state.kv_committed_len)

    def finish(self, rng):
        seq = self.pick(rng)
        if seq is not None:
            self.cache.release(self.live.pop(seq.seq_id), finished=True)

    def retract(self, rng):
        seq = self.pick(rng)
        if seq is not None:
            self.cache.release(self.live.pop(seq.seq_id), finished=False)

    def evict(self, rng):
        self.cache.tree.evict(rng.randrange(1, 20))

    def alloc_evict(self, rng):
        evict_to_free_tokens(self.cache, rng.randrange(1, 60))

    def match(self, rng):
        seq = self.random_seq(rng)
        if rng.random() < 0.5:
            self.cache.match(seq, capped=rng.random() < 0.5)
        else:
            self.cache.tree.touch_prefix(RadixKey(seq.token_ids, None, seq.salt))

    def lock(self, rng):
        node = self.cache.match(self.random_seq(rng), capped=False).handle
        self.locks.append(self.cache.tree.lock(node))

    def unlock(self, rng):
        if self.locks:
            self.cache.tree.unlock(self.locks.pop(rng.randrange(len(self.locks))))

    def reset(self, rng):
        assert self.cache.reset() is (not self.live)
        if not self.live:
            self.locks.clear()  # the old tree is gone

    def pick(self, rng):
        return self.live[rng.choice(sorted(self.live))] if self.live else None

    def check(self):
        cache, tree = self.cache, self.cache.tree
        assert tree.evictable_size() + tree.protected_size() == tree.total_size()
        u = cache.usage()
        assert u.available + u.evictable + u.protected == u.capacity
        assert tree.evictable_leaves == {
            n for n in tree.nodes() if n.lock_ref == 0 and not n.children
        }
        if not self.locks:
            cache.check_integrity()


def run_ops(page_size, policy, ops):
    fuzzer = Fuzzer(page_size, policy)
    for op, seed in ops:
        getattr(fuzzer, op)(random.Random(seed))
        fuzzer.check()
    for seq in list(fuzzer.live.values()):
        fuzzer.cache.release(seq, finished=True)
    for lock in fuzzer.locks:
        fuzzer.cache.tree.unlock(lock)
    fuzzer.locks.clear()
    fuzzer.live.clear()
    fuzzer.check()
    assert fuzzer.cache.usage().protected == 0


OP_LISTS = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 2**20)), min_size=NUM_OPS, max_size=NUM_OPS
)
POLICIES = st.sampled_from(["lru", "lfu", "priority", "mru", "slru", "fifo", "filo", "tlru"])
# No shrinking: a failing 100-step list is readable as is, and shrinking it takes minutes.
FUZZ = settings(
    max_examples=55,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
)


@FUZZ
@given(policy=POLICIES, ops=OP_LISTS)
def test_fuzz_page1_accounting_holds_after_every_operation(policy, ops):
    run_ops(1, policy, ops)


@FUZZ
@given(policy=POLICIES, ops=OP_LISTS)
def test_fuzz_page4_accounting_holds_after_every_operation(policy, ops):
    run_ops(4, policy, ops)
