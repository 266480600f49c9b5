"""SGLang 0.5.23's overlap event loop (`event_loop_overlap`, `managers/scheduler.py`): one step late.

Upstream launches batch N+1 before it processes batch N's results, so everything that processing
does happens after the next batch was formed (docs/scheduler_x_cache.md, "the overlap scheduler"):

* a prefilled prompt's `cache_unfinished_req` (the radix insert): matchable from step N+2, not N+1;
  the in-flight chunk of a chunked prompt is still committed when step N+1 is formed (that is
  `get_next_batch_to_run`, not result processing), so only a prompt's last chunk is late;
* a finished request's release: it stays in the running batch for a prefill round of step N+1,
  a decode step N+1 leaves it out (`_reqs_finishing_inflight`), and it is released after that;
* a request retracted while forming step N+1 is skipped when batch N is processed, so the token
  batch N sampled for it never joins its output: its re-prefill samples that position again.

`PendingResult` is the batch upstream keeps (`batch.copy()`) for that processing; `process`
applies it. With overlap off the scheduler processes each result at once and this is unused.
"""

from __future__ import annotations

from typing import NamedTuple

from engines.cache.protocol import AnyPrefixCache, GroupRelease
from engines.sched.base import StepPlan
from engines.sequence import Sequence


class PendingResult(NamedTuple):
    """A launched batch whose results are processed after the next batch is formed."""

    plan: StepPlan
    is_prefill: bool
    chunked: Sequence | None  # the request this prefill batch left mid-prompt (upstream is_chunked)
    # requests whose step sampled a token: until processed, upstream's output_ids lacks it
    sampled: frozenset[str]


def pending_of(plan: StepPlan, is_prefill: bool, chunked: Sequence | None) -> PendingResult:
    """The result of an executed plan (sequences already advanced by the step loop)."""
    sampled = frozenset(
        item.seq.seq_id for item in plan.scheduled if item.seq.num_tokens == item.end + 1
    )
    return PendingResult(plan, is_prefill, chunked, sampled)


def process(cache: AnyPrefixCache, pending: PendingResult, retracted: set[str]) -> None:
    """`process_batch_result` of a kept batch: prefill: commit each unfinished request up to what
    it prefilled (`cache_unfinished_req`), release each finished one; decode: release the finished
    ones as one free group. The chunked request (`is_chunked`) and requests retracted meanwhile
    are skipped; a request that finished earlier never reaches here (it is not in the plan)."""
    if pending.is_prefill:
        for item in pending.plan.scheduled:
            seq = item.seq
            if seq is pending.chunked or seq.seq_id in retracted:
                continue
            if seq.is_finished:
                cache.release(seq, finished=True)
            else:
                cache.commit(seq, item.end)
        return
    done = [
        item.seq
        for item in pending.plan.scheduled
        if item.seq.is_finished and item.seq.seq_id not in retracted
    ]
    release_finished(cache, done)


def unsample(seq: Sequence) -> None:
    """Drop the token a retracted request's in-flight batch sampled. Upstream's result processing
    skips a request marked retracted (`is_retracted`, set by `reset_for_retract` in
    `managers/schedule_batch.py`; the skip is in `scheduler_components/batch_result_processor.py`
    for prefill and decode results), so that token never reaches `output_ids`; the re-prefill
    covers one token less and its last position samples it again."""
    del seq.token_ids[-1]


def release_finished(cache: AnyPrefixCache, done: list[Sequence]) -> None:
    """Release a decode step's finished requests: as one free group where the cache frees groups
    (SGLang's allocator), else one by one, which is the same thing for a cache without groups."""
    if isinstance(cache, GroupRelease):
        cache.release_batch(done, finished=True)
        return
    for seq in done:
        cache.release(seq, finished=True)
