"""`parallel`: n > 1 samples per prompt (docs/benchmarking.md §3.4).

One Request per prompt with `n` and `sample_output_ids`: one scripted reply per sample, whose
first tokens differ, so the samples share exactly the prompt and diverge at their first output
token. The harness fans each request out into n children (`n_semantics = fanout`). Prompts differ
at their first token, so different prompts share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.base import WorkloadParams, check_distinct
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, token_ids


@dataclass
class ParallelParams(WorkloadParams):
    name: str = "parallel"
    family: str = "parallel"
    n: int = 4
    prompt_len: int = 100
    output_len: int = 32
    num_prompts: int = 16
    # every sample replays one reply (what greedy decoding gives): the samples then fill identical
    # output blocks side by side, which APC keeps as duplicates and radix frees at insert
    identical_samples: bool = False

    positive = ("n", "prompt_len", "output_len", "num_prompts")

    def prompt_tokens_estimate(self) -> int:
        return self.num_prompts * self.n * self.prompt_len  # one engine sequence per sample

    def requests_estimate(self) -> int:
        return self.num_prompts * self.n


def generate_parallel(p: ParallelParams, seed: int, space: TokenSpace) -> list[Request]:
    check_distinct("num_prompts", p.num_prompts, space, "prompts")
    check_distinct("n", p.n, space, "samples")
    heads = distinct_heads(space, p.num_prompts, seed, "parallel")
    out = []
    for i in range(p.num_prompts):
        sample_heads = distinct_heads(space, p.n, seed, "sample", i)
        samples = tuple(
            as_tuple(
                token_ids(space, (seed, "sample", i, s), p.output_len, head=int(sample_heads[s]))
            )
            for s in range(p.n)
        )
        out.append(
            Request(
                request_id=f"p{i}",
                prompt_ids=as_tuple(
                    token_ids(space, (seed, "parallel", i), p.prompt_len, head=int(heads[i]))
                ),
                output_ids=samples[0],
                n=p.n,
                sample_output_ids=() if p.identical_samples else samples,
                shared_prefix_len=0,
            )
        )
    return out
