"""What the engine is asked to run: one child request, as token ids (n > 1 is fanned out before).

The harness turns workload Requests into these; the engine never sees workload objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_ids: Sequence[int]  # a tuple, or a compact array('i') (whole-trace replays)
    max_new_tokens: int
    scripted_output_ids: tuple[int, ...] | None = None  # None: sample (greedy)
    arrival_s: float = 0.0
    parent_id: str | None = None  # the workload request this child belongs to (n > 1)
    sample_index: int = 0
    after: str | None = None  # request_id that must finish first (multi-turn)
    think_s: float = 0.0  # released this long after `after` finishes
    salt: str | None = None
    lora_id: str | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        if not self.prompt_ids:
            raise ValueError(f"request {self.request_id}: empty prompt")
        if self.max_new_tokens <= 0:
            raise ValueError(f"request {self.request_id}: max_new_tokens must be positive")
        if (
            self.scripted_output_ids is not None
            and len(self.scripted_output_ids) < self.max_new_tokens
        ):
            raise ValueError(
                f"request {self.request_id}: scripted output shorter than max_new_tokens"
            )
