"""SGLang 0.5.23's decode round (`Scheduler.update_running_batch`, `ScheduleBatch.check_decode_mem`,
`retract_decode`, `managers/scheduler.py` and `managers/schedule_batch.py`), a part of
`engines.sched.sglang.SglangScheduler` kept in its own file.

A decode step runs every request of the running batch; when the page-aligned need of the step is
not free after eviction, requests are retracted (fewest outputs, longest prompt first) until it
is, and the new-token ratio is reset; otherwise the ratio decays. Under the overlap loop the
outputs are counted as upstream sees them (docs/scheduler_x_cache.md).
"""

from __future__ import annotations

from collections import deque

from engines.cache.protocol import AnyPrefixCache
from engines.cache.records import Allocation, CacheIntegrityError
from engines.sched.base import ScheduledSeq, StepPlan
from engines.sequence import SeqStatus, Sequence

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS


class SglangDecodeRound:
    """The decode-round methods of `SglangScheduler`, over the state it owns."""

    cache: AnyPrefixCache
    batch: list[Sequence]
    batch_is_full: bool
    new_token_ratio: float
    new_token_ratio_decay: float
    min_new_token_ratio: float
    _recompute_until: dict[str, int]

    @property
    def in_flight(self) -> frozenset[str]:
        """Requests whose last sampled token upstream has not processed yet (overlap only)."""
        return frozenset()

    def _decode_round(self, waiting: deque[Sequence], running: list[Sequence]) -> StepPlan:
        """`update_running_batch` on a batch `schedule` has filtered already."""
        initial_bs = len(self.batch)
        if not self.batch:
            return StepPlan()
        retracted: list[Sequence] = []
        if not self._check_decode_mem(self.batch):
            retracted = self._retract(waiting, running)
        else:
            self._decay_new_token_ratio()
        if len(self.batch) < initial_bs:
            self.batch_is_full = False
        if not self.cache.allocate(
            [Allocation(seq, 1) for seq in self.batch], decode=True, budgeted=True
        ):
            raise CacheIntegrityError("Decode out of memory: the memory check did not hold")
        # Overlap: a request whose finish is still in flight takes its slot (upstream decodes it
        # and discards the token) but is not run here; without overlap none is in the batch.
        return StepPlan(
            [
                ScheduledSeq(seq, seq.num_computed_tokens, 1)
                for seq in self.batch
                if not seq.is_finished
            ],
            retracted,
        )

    def _decay_new_token_ratio(self) -> None:
        self.new_token_ratio = max(
            self.new_token_ratio - self.new_token_ratio_decay, self.min_new_token_ratio
        )

    def _decode_need(self, seqs: list[Sequence]) -> int:
        """`new_tokens_required_next_decode`: a page for each request whose committed length is
        on a page boundary (its next token opens a page), nothing for the others."""
        page = self.cache.block_size
        if page == 1:
            return len(seqs)
        return page * sum(1 for seq in seqs if seq.num_computed_tokens % page == 0)

    def _decode_headroom(self, batch_size: int) -> int:
        """Free tokens a decode step of `batch_size` requests needs so that nothing evicts: the
        step's allocation (`alloc_paged_token_slots_decode`) evicts up to one page per request,
        an over-estimate upstream keeps; it covers the memory check's page-aligned need too."""
        return batch_size * self.cache.block_size

    def _check_decode_mem(self, seqs: list[Sequence]) -> bool:
        need = self._decode_need(seqs)
        self.cache.evict(need)
        return self.cache.free_tokens() >= need

    def _retract(self, waiting: deque[Sequence], running: list[Sequence]) -> list[Sequence]:
        """§7.3: victims (fewest outputs, longest input) from the back until the step fits.
        Returns the victims in retraction order.

        Under overlap the outputs are counted as upstream sees them (an in-flight token not yet),
        and a request whose finish is in flight is never a victim: here it has finished already
        (upstream could retract it and run it again; docs/scheduler_x_cache.md)."""
        batch, cache = self.batch, self.cache
        in_flight = self.in_flight
        outputs = [seq.num_output_tokens - (seq.seq_id in in_flight) for seq in batch]
        order = sorted(
            range(len(batch)),
            key=lambda i: (batch[i].is_finished, outputs[i], -batch[i].num_prompt_tokens),
            reverse=True,
        )
        first = True
        victims: list[Sequence] = []
        while first or not self._check_decode_mem([batch[i] for i in order]):
            if len(order) == 1 or batch[order[-1]].is_finished:
                break
            first = False
            seq = batch[order.pop()]
            computed = seq.num_computed_tokens
            cache.release(seq, finished=False)
            cache.evict(len(order) * RETRACT_DECODE_STEPS)
            self._recompute_until[seq.seq_id] = max(
                self._recompute_until.get(seq.seq_id, 0), computed
            )
            seq.status = SeqStatus.PREEMPTED
            seq.num_computed_tokens = 0
            seq.num_preemptions += 1
            running.remove(seq)
            waiting.append(seq)
            victims.append(seq)
        self.batch = [batch[i] for i in order]
        decoded = sum(outputs[i] for i in order)
        max_new = sum(seq.max_new_tokens for seq in self.batch)
        self.new_token_ratio = min(
            1.0, (decoded + RETRACT_DECODE_STEPS * len(self.batch)) / (max_new + 1)
        )
        return victims
