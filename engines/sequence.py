"""The scheduler's per-request state: token ids so far, progress, and outcome counters.

A `Sequence` is one child request (n>1 is fanned out before it reaches the engine). Caches key their
per-request state by `seq_id` and read, never write, the fields here; the scheduler owns them.
"""

from __future__ import annotations

import enum
from collections.abc import MutableSequence
from dataclasses import dataclass, field


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Mutable state of one request inside the engine.

    `token_ids` holds the prompt followed by every token generated so far: a list, or a compact
    array('i') when the request's prompt is one (whole-trace replays); both index, slice, append
    and extend alike. `num_computed_tokens`
    counts the leading tokens whose K/V is in the pool (vLLM's name); after a forward step that
    sampled a token, `num_tokens == num_computed_tokens + 1`.
    """

    seq_id: str
    token_ids: MutableSequence[int]
    num_prompt_tokens: int
    max_new_tokens: int
    salt: str | None = None
    lora_id: str | None = None
    priority: int = 0
    arrival_s: float = 0.0
    # When it reached the scheduler's queue (a held child: when released); under SGLang's overlap
    # loop a request received after a step was launched waits for the formation after the next.
    received_s: float = 0.0
    status: SeqStatus = SeqStatus.WAITING
    num_computed_tokens: int = 0
    # Prompt tokens reused at the first admission (vLLM num_cached_tokens / SGLang cached_tokens).
    num_cached_tokens: int | None = None
    # Of those, the tokens a host tier supplied (engines/cache/tiers.py; vLLM's
    # external_cached_tokens, SGLang's cached_tokens_details.host).
    num_host_cached_tokens: int = 0
    # Of those, the tokens a storage tier supplied (engines/cache/storage_tier.py; SGLang's
    # cached_tokens_details.storage): disjoint from the host ones, device + host + storage = all.
    num_storage_cached_tokens: int = 0
    # Tokens of its KV a host tier stored (counted by the tier as it stores them), and its loads
    # as the executor priced them: bytes into the device and seconds on the host link (queueing
    # included).
    num_host_stored_tokens: int = 0
    host_load_bytes: int = 0
    host_load_s: float = 0.0
    num_preemptions: int = 0
    # Tokens recomputed after a preemption (not part of the hit rate, docs/benchmarking.md §5.1).
    num_recomputed_tokens: int = 0
    # Test-only switch: prompt tokens may not be read from the cache (vLLM prompt_logprobs).
    skip_cache_read: bool = False
    # Scripted decoding: the reply to emit, token by token (None: sample greedily).
    scripted_output_ids: tuple[int, ...] | None = None
    tags: dict[str, object] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SeqStatus.FINISHED

    @property
    def done_generating(self) -> bool:
        return self.num_output_tokens >= self.max_new_tokens

    @property
    def prompt_ids(self) -> MutableSequence[int]:
        return self.token_ids[: self.num_prompt_tokens]
