"""Cache-level decode runs: sequences one token behind and both ways of allocating their steps.

`run_both` gives a per-step copy (one decode allocation a step:
`BudgetedAllocation.allocate_decode` where the cache has it, else `allocate`) and a run copy
(`DecodeRunAllocation.allocate_decode_run`) of the same cache; each design's test compares its
own state of the two
(tests/unit/test_apc_decode_run.py, tests/unit/test_radix_decode_run.py).
"""

from __future__ import annotations

import copy

import numpy as np

from engines.cache.protocol import BudgetedAllocation
from engines.cache.records import Allocation
from engines.sequence import Sequence


def decoding(num: int, seed: int, block_size: int) -> list[Sequence]:
    """Requests with prompts of varied lengths around block boundaries, each one token behind."""
    rng = np.random.default_rng(seed)
    seqs = []
    for i in range(num):
        n = int(rng.integers(1, 5 * block_size))
        ids = rng.integers(1, 50, n + 1).tolist()  # a small vocabulary: duplicate blocks occur
        seqs.append(Sequence(f"s{i}", ids, num_prompt_tokens=n + 1, max_new_tokens=1000))
    return seqs


def admit(cache, seqs: list[Sequence]) -> None:
    """Prefill each request up to its last token (num_computed = num_tokens - 1)."""
    for seq in seqs:
        match = cache.match(seq)
        assert cache.allocate([Allocation(seq, seq.num_tokens - 1 - match.num_tokens, adopt=match)])
        seq.num_computed_tokens = seq.num_tokens - 1
        cache.commit(seq, seq.num_computed_tokens)


def run_both(cache, seqs, num_steps, limits, lag, rng):
    """(per-step copy, run copy) after `num_steps` steps of one token for every seq."""
    stepped = copy.deepcopy((cache, seqs))
    step_cache, step_seqs = stepped
    tokens = [rng.integers(1, 50, num_steps).tolist() for _ in seqs]
    for s in range(num_steps):
        items = [
            Allocation(seq, 1, matchable_limit=(limits[i] if s == 0 else seq.num_tokens - lag))
            for i, seq in enumerate(step_seqs)
        ]
        if lag == 0 and s > 0:
            items = [Allocation(it.seq, 1) for it in items]
        budgeted = step_cache if isinstance(step_cache, BudgetedAllocation) else None
        assert (budgeted.allocate_decode if budgeted else step_cache.allocate)(items)
        for seq, own in zip(step_seqs, tokens):
            seq.num_computed_tokens += 1
            seq.token_ids.append(own[s])
    for seq, own in zip(seqs, tokens):
        seq.token_ids.extend(own)
    items = [Allocation(seq, 1, matchable_limit=limits[i]) for i, seq in enumerate(seqs)]
    cache.allocate_decode_run(items, num_steps, matchable_lag=lag)
    for seq in seqs:
        seq.num_computed_tokens += num_steps
    return step_cache, cache
