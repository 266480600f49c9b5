"""The engine's front stage: what a server does with one API request before its scheduler sees it.

Real servers receive `n` in one request and fan out themselves, so the fan-out belongs to the
engine, chosen by the scheduler design. vLLM 0.33 (`vllm/v1/engine/parallel_sampling.py`
`ParentRequest`, used by `AsyncLLM.add_request`) turns a request with n > 1 into n child requests
with ids "{index}_{parent}" that share the prompt and meet in the prefix cache; n == 1 keeps the
request's own id. Until SGLang's own front stage is modelled (its tokenizer manager's prefix
request before the samples, issue [4/7]), the SGLang scheduler gets the same fan-out.
"""

from __future__ import annotations

from typing import Protocol

from engines.registry import Registry
from engines.request import CompletionRequest, GenerationRequest


class Frontend(Protocol):
    def split(self, req: CompletionRequest) -> list[GenerationRequest]:
        """The children of `req`, in sample order; their `parent_id` is `req.request_id`."""
        ...


class VllmFanOut:
    """vLLM's parallel sampling: one child per sample, all queued at once."""

    def split(self, req: CompletionRequest) -> list[GenerationRequest]:
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
            )
            for index in range(req.n)
        ]


# name of the scheduler design -> its front stage.
FRONTENDS: Registry[Frontend] = Registry("frontend")
FRONTENDS.add("vllm", VllmFanOut())
FRONTENDS.add("sglang", VllmFanOut())
