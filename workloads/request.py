"""The Request record every generator emits and the engine consumes (through the harness)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    """One benchmark request, as token ids.

    prompt_ids: a tuple of ints, or (trace replays, for memory) an `array('i')`; consumers read it
      as a sequence of ints and never mutate it.
    output_ids: the scripted reply (scripted decoding emits these tokens one per decode step, so
      every engine sees the same stream); its length is the output length. max_new_tokens must
      equal len(output_ids) when both are given.
    after / think_s: multi-turn dependency; this request is released `think_s` seconds after the
      request `after` finishes (its arrival_s is then ignored).
    n: samples; the harness fans n > 1 out into n child requests that share the prompt.
    sample_output_ids: for n > 1, one scripted reply per sample (their first tokens differ, so the
      samples diverge from their first output token); empty means every sample replays output_ids.
    salt: tenant namespace (vLLM cache_salt, SGLang cache_salt); None is the global namespace.
    shared_prefix_len: ground truth from the generator: how many leading prompt tokens this
      request shares with content generated before it (unbounded cache, token granularity): the
      prompts of earlier requests, plus the replies of requests that a later turn names as `after`
      minus their final token (its KV is never computed). For n > 1 it is the first sample's; the
      other samples share the whole prompt.
    """

    request_id: str
    prompt_ids: Sequence[int]
    output_ids: tuple[int, ...] | None = None
    max_new_tokens: int | None = None
    arrival_s: float = 0.0
    n: int = 1
    session_id: str | None = None
    turn: int = 0
    after: str | None = None
    think_s: float = 0.0
    salt: str | None = None
    lora_id: str | None = None
    shared_prefix_len: int = 0
    tags: dict[str, object] = field(default_factory=dict)
    sample_output_ids: tuple[tuple[int, ...], ...] = ()

    @property
    def output_len(self) -> int:
        if self.output_ids is not None:
            return len(self.output_ids)
        assert self.max_new_tokens is not None
        return self.max_new_tokens
