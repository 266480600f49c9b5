"""`unique`: the 0%-hit overhead arm (docs/benchmarking.md §3.6, §6).

Every prompt is its own stream with identical lengths, and the first tokens of all prompts are
distinct, so no two prompts share even one token. No BOS and no template: a shared BOS alone
would give page-1 radix a 1-token hit.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.base import WorkloadParams, check_distinct
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, token_ids


@dataclass
class UniqueParams(WorkloadParams):
    name: str = "unique"
    family: str = "unique"
    num_prompts: int = 64
    prompt_len: int = 1024  # vLLM --random-input-len
    output_len: int = 128  # vLLM --random-output-len

    positive = ("num_prompts", "prompt_len", "output_len")

    def prompt_tokens_estimate(self) -> int:
        return self.num_prompts * self.prompt_len

    def requests_estimate(self) -> int:
        return self.num_prompts


def generate_unique(p: UniqueParams, seed: int, space: TokenSpace) -> list[Request]:
    check_distinct("num_prompts", p.num_prompts, space, "prompts")
    heads = distinct_heads(space, p.num_prompts, seed, "unique")
    return [
        Request(
            request_id=f"u{i}",
            prompt_ids=as_tuple(
                token_ids(space, (seed, "unique", i), p.prompt_len, head=int(heads[i]))
            ),
            output_ids=as_tuple(token_ids(space, (seed, "unique-output", i), p.output_len)),
            shared_prefix_len=0,
        )
        for i in range(p.num_prompts)
    ]
