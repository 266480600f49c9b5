"""Shared helpers for the radix tests: a recording allocator, sequences, and request drivers.

`serve` runs one request through the hooks by hand (admit, prefill, decode, finish), the way the
scheduler would; `drive` runs a RadixAdmission under the generic scheduler's contract
(engines/sched/base.py: advance, append the scripted token, finish, `finish_step`).
"""

from __future__ import annotations

from collections import deque

from engines.cache.radix.cache import RadixCache
from engines.cache.radix.hooks import (
    match_request,
    prepare_decode,
    prepare_extend,
    release_kv_cache,
    start_request,
)
from engines.cache.radix.recency import LogicalClock
from engines.sched.base import StepBudget
from engines.sequence import SeqStatus, Sequence


class RecordingAllocator:
    """Stands in for the pool in tree-level tests: counts available slots, records frees."""

    page_size = 1

    def __init__(self, available: int = 0) -> None:
        self.available = available
        self.freed: list[int] = []

    def available_size(self) -> int:
        return self.available

    def free(self, idx) -> None:
        self.freed.extend(idx)
        self.available += len(idx)

    def free_segment(self, idx, start_pos: int = 0) -> None:
        self.free(idx)


def make_seq(
    seq_id: str, prompt, outputs=(), *, salt=None, lora_id=None, priority=0, tags=None
) -> Sequence:
    outputs = tuple(outputs)
    return Sequence(
        seq_id,
        list(prompt),
        len(prompt),
        max(len(outputs), 1),
        salt=salt,
        lora_id=lora_id,
        priority=priority,
        scripted_output_ids=outputs or (0,),
        tags=dict(tags or {}),
    )


def new_cache(page_size: int = 1, capacity: int = 256, **kw) -> RadixCache:
    kw.setdefault("clock", LogicalClock())
    return RadixCache(page_size, capacity, **kw)


def admit(cache: RadixCache, seq: Sequence, capped: bool = True):
    """Match, lock, take a row and allocate the whole remaining input; returns the state."""
    match = match_request(cache.tree, seq, capped)
    st = start_request(
        cache,
        seq,
        match.device_prefix_len,
        match.last_device_node,
        cache.tree.lock(match.last_device_node),
    )
    prepare_extend(
        cache, [(seq, st, match.device_prefix_len, seq.num_tokens - match.device_prefix_len)]
    )
    seq.num_computed_tokens = seq.num_tokens
    return st


def decode_to_end(cache: RadixCache, seq: Sequence) -> None:
    """Append the scripted outputs; every token but the last gets its KV slot (a decode step)."""
    st = cache.reqs[seq.seq_id]
    assert seq.scripted_output_ids is not None  # make_seq scripts every reply
    for i, token in enumerate(seq.scripted_output_ids[: seq.max_new_tokens]):
        if i:
            prepare_decode(cache, [st])
        seq.token_ids.append(token)
    seq.num_computed_tokens = seq.num_tokens - 1


def serve(cache: RadixCache, seq: Sequence, capped: bool = True) -> int:
    """One request start to finish, alone; returns the tokens it computed at prefill."""
    st = admit(cache, seq, capped)
    computed = st.kv_committed_len - st.prefix_len
    decode_to_end(cache, seq)
    seq.status = SeqStatus.FINISHED
    cache.release(seq, finished=True)
    return computed


def retract(cache: RadixCache, seq: Sequence) -> None:
    release_kv_cache(cache, cache.reqs.pop(seq.seq_id), seq, do_checkpoint=False)


def step(admission, waiting: deque, running: list, budget: StepBudget):
    """One scheduler step under the Scheduler contract; returns (plan, finished)."""
    plan = admission.schedule(waiting, running, budget)
    return plan, complete(admission, plan, running)


def complete(admission, plan, running: list) -> list:
    """Apply an executed plan as the scheduler does; returns the finished sequences."""
    finished = []
    for item in plan.scheduled:
        seq = item.seq
        seq.num_computed_tokens = item.end
        if item.end == seq.num_tokens:
            seq.token_ids.append(seq.scripted_output_ids[seq.num_output_tokens])
            if seq.done_generating:
                seq.status = SeqStatus.FINISHED
                finished.append(seq)
    running[:] = [s for s in running if not s.is_finished]
    admission.finish_step(plan, finished)
    return finished


def drive(
    admission, seqs, budget: StepBudget, check: bool = True, max_steps: int = 100_000
) -> list:
    """Run until every sequence finished; returns the plans."""
    waiting, plans = deque(seqs), []
    running: list[Sequence] = []
    while waiting or running:
        plan, _ = step(admission, waiting, running, budget)
        plans.append(plan)
        if check:
            admission.cache.check_integrity()
        assert len(plans) < max_steps
    return plans
