"""Per-step log (`engine.step_log`): one typed record for each step the step loop completes.

A record names the step (its index since the engine was built, warm-up included), its kind, each
scheduled request with the tokens it computed, and the requests preempted or retracted while it
was planned. A decode run appears as its individual steps, so a log reads the same whether
`engine.decode_runs` is on or off; tests pin step sequences against upstream with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.sched.base import StepPlan
from engines.sequence import Sequence

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"


@dataclass(frozen=True)
class StepRecord:
    index: int
    kind: str  # prefill | decode | mixed
    scheduled: tuple[tuple[str, int], ...]  # (request id, new tokens), in plan order
    preempted: tuple[str, ...] = ()  # retracted (SGLang) or preempted (vLLM) while planning it

    def as_row(self) -> dict[str, object]:
        """The JSON line `steps.jsonl` holds for this step."""
        return {
            "step": self.index,
            "kind": self.kind,
            "requests": [[rid, n] for rid, n in self.scheduled],
            "preempted": list(self.preempted),
        }


def is_decode(seq: Sequence, start: int, num_new_tokens: int, was_running: bool) -> bool:
    """One token of a generated position for a request that was running before the step. A
    request admitted in this step (even a retracted one whose match leaves one token) extends."""
    return was_running and num_new_tokens == 1 and start >= seq.num_prompt_tokens


def record_step(index: int, plan: StepPlan, running_before: set[str]) -> StepRecord:
    """The record of one planned step; `running_before` holds the ids running before planning."""
    decodes = [
        not plan.extend  # an extend batch runs every row as a prefill
        and is_decode(item.seq, item.start, item.num_new_tokens, item.seq.seq_id in running_before)
        for item in plan.scheduled
    ]
    kind = DECODE if all(decodes) else PREFILL if not any(decodes) else MIXED
    return StepRecord(
        index,
        kind,
        tuple((item.seq.seq_id, item.num_new_tokens) for item in plan.scheduled),
        tuple(seq.seq_id for seq in plan.preempted),
    )


def decode_steps(first_index: int, seq_ids: tuple[str, ...], num_steps: int) -> list[StepRecord]:
    """The records of a decode run's `num_steps` steps: one token for each request in each."""
    scheduled = tuple((rid, 1) for rid in seq_ids)
    return [StepRecord(first_index + k, DECODE, scheduled) for k in range(num_steps)]
