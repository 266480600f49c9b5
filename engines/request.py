"""What the engine is asked to run, as token ids: an API request and the children it splits into.

`CompletionRequest` is what a server receives (one prompt, `n` samples); the engine's front
stage (engines/frontend.py) splits it into `GenerationRequest`s, one per sample, which the
scheduler runs. The harness turns workload Requests into CompletionRequests; the engine never
sees workload objects, and client behaviour (arrival schedules, turn dependencies) stays in the
harness's client layer.
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
    arrival_s: float = 0.0  # when engines.batch.run_batch releases it (a client passes its own)
    parent_id: str | None = None  # the workload request this child belongs to (n > 1)
    sample_index: int = 0
    salt: str | None = None
    lora_id: str | None = None
    priority: int = 0
    # Front-stage ordering (engines/frontend.py, SGLang's path): queue this child only once the
    # child `wait_for` has finished; a `prefill_only` child is the front stage's own prefix
    # request (not a sample: not recorded with the samples, not counted in its parent's).
    wait_for: str | None = None
    prefill_only: bool = False

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


@dataclass(frozen=True)
class CompletionRequest:
    """One API request: a prompt and `n` samples of `max_new_tokens` each.

    scripted_output_ids: one scripted reply per sample (scripted decoding), or None to sample.
    """

    request_id: str
    prompt_ids: Sequence[int]
    max_new_tokens: int
    n: int = 1
    scripted_output_ids: tuple[tuple[int, ...], ...] | None = None
    salt: str | None = None
    lora_id: str | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"request {self.request_id}: n must be at least 1, got {self.n}")
        if self.scripted_output_ids is not None and len(self.scripted_output_ids) != self.n:
            raise ValueError(
                f"request {self.request_id}: {len(self.scripted_output_ids)} scripts for n={self.n}"
            )
