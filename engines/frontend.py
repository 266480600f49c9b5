"""The engine's front stage: what a server does with one API request before its scheduler sees it.

Real servers receive `n` in one request and fan out themselves, so the fan-out belongs to the
engine, chosen by the scheduler design. vLLM 0.33 (`vllm/v1/engine/parallel_sampling.py`
`ParentRequest`) turns a request with n > 1 into n children "{index}_{parent}" queued at once,
which meet in the prefix cache (same-step hashing). SGLang 0.5.23 does two things first
(docs/radix.md §17): its tokenizer manager sends an n > 1 prompt once with max_new_tokens=0 and
waits for it before sending the samples, and its frontend language caches a program batch's
traced common prefix before running the batch. Both are prefill-only children that the others
wait for (`GenerationRequest.wait_for`), which the engine holds back until they finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engines.registry import Registry
from engines.request import CompletionRequest, GenerationRequest

# SGLang's cache_program precaches a traced prefix only when it is longer than 64 characters;
# at ~4 characters a token (the tokenizers these models use) that is 16 tokens.
MIN_PRECACHE_TOKENS = 16


class Frontend(Protocol):
    def split(self, req: CompletionRequest) -> list[GenerationRequest]:
        """The children of `req`, in sample order; their `parent_id` is `req.request_id`."""
        ...

    def split_batch(self, reqs: Sequence[CompletionRequest]) -> list[GenerationRequest]:
        """The children of a batch submitted together (a frontend program's run_batch)."""
        ...


def fan_out(req: CompletionRequest, wait_for: str | None = None) -> list[GenerationRequest]:
    """One child per sample, sharing the prompt; "{i}_{id}" ids when n > 1."""
    scripts = req.scripted_output_ids
    return [
        GenerationRequest(
            request_id=req.request_id if req.n == 1 else f"{index}_{req.request_id}",
            prompt_ids=req.prompt_ids,  # shared, never copied (a trace holds ~1e8 tokens)
            max_new_tokens=req.max_new_tokens,
            scripted_output_ids=None if scripts is None else scripts[index],
            parent_id=req.request_id,
            sample_index=index,
            salt=req.salt,
            lora_id=req.lora_id,
            priority=req.priority,
            wait_for=wait_for,
        )
        for index in range(req.n)
    ]


def prefill_only(
    request_id: str,
    prompt_ids: Sequence[int],
    like: CompletionRequest,
    wait_for: str | None,
    parent_id: str | None = None,
) -> GenerationRequest:
    """SGLang's max_new_tokens=0 request: its prefill runs and its prompt KV enters the cache.
    Modelled as one new token, which SGLang's prefill also samples and then finishes on (the
    token's own KV is never computed, so nothing past the prompt is cached)."""
    scripts = like.scripted_output_ids
    return GenerationRequest(
        request_id=request_id,
        prompt_ids=prompt_ids,
        max_new_tokens=1,
        scripted_output_ids=None if scripts is None else scripts[0][:1],
        parent_id=parent_id or like.request_id,
        salt=like.salt,
        lora_id=like.lora_id,
        priority=like.priority,
        wait_for=wait_for,
        prefill_only=True,
    )


class VllmFanOut:
    """vLLM's parallel sampling: one child per sample, all queued at once; no batch path."""

    def split(self, req: CompletionRequest) -> list[GenerationRequest]:
        return fan_out(req)

    def split_batch(self, reqs: Sequence[CompletionRequest]) -> list[GenerationRequest]:
        return [child for req in reqs for child in self.split(req)]


class SglangFrontend:
    """SGLang's front stage. n > 1: TokenizerManager._handle_batch_request sends the prompt with
    max_new_tokens=0, awaits it, then sends the n samples. A batch: lang/interpreter.py
    run_program_batch calls cache_program, which precaches the traced prefix (longer than 64
    characters) before the batch's programs run; the traced prefix is modelled as the batch's
    longest common token prefix."""

    def split(self, req: CompletionRequest, wait_for: str | None = None) -> list[GenerationRequest]:
        if req.n == 1:
            return fan_out(req, wait_for)
        prefix_id = f"prefix_{req.request_id}"
        head = prefill_only(prefix_id, req.prompt_ids, req, wait_for)
        return [head, *fan_out(req, wait_for=prefix_id)]

    def split_batch(self, reqs: Sequence[CompletionRequest]) -> list[GenerationRequest]:
        # Prompts in different namespaces (cache_salt, LoRA) never share KV: nothing to precache.
        one_space = len({(r.salt, r.lora_id) for r in reqs}) == 1
        common = _common_prefix_len(reqs) if len(reqs) > 1 and one_space else 0
        # A common prefix that is a whole prompt would leave nothing to prefill after it; keep
        # one token back (a zero-token prefill is not a request).
        common = min(common, min(len(r.prompt_ids) for r in reqs) - 1)
        if common < MIN_PRECACHE_TOKENS:
            return [child for req in reqs for child in self.split(req)]
        first = reqs[0]
        precache_id = f"precache_{first.request_id}"
        head = prefill_only(precache_id, first.prompt_ids[:common], first, None, precache_id)
        return [head, *(child for req in reqs for child in self.split(req, precache_id))]


class NoFrontend(VllmFanOut):
    """The SGLang scheduler with engine.sglang_frontend=false: vLLM's plain fan-out, so the
    front stage's effect can be measured on its own."""


def _common_prefix_len(reqs: Sequence[CompletionRequest]) -> int:
    first = reqs[0].prompt_ids
    n = min(len(r.prompt_ids) for r in reqs)
    for req in reqs[1:]:
        ids = req.prompt_ids
        i = 0
        while i < n and ids[i] == first[i]:
            i += 1
        n = i
    return n


# name of the scheduler design -> its front stage ("sglang" with engine.sglang_frontend=false:
# "sglang-off").
FRONTENDS: Registry[Frontend] = Registry("frontend")
FRONTENDS.add("vllm", VllmFanOut())
FRONTENDS.add("sglang", SglangFrontend())
FRONTENDS.add("sglang-off", NoFrontend())
