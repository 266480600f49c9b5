"""`system_prompt`: groups of prompts sharing a system prompt (SGLang generated-shared-prefix,
vLLM `prefix_repetition`; docs/benchmarking.md §3.1).

prompt = system[group] + question, as ids. System prompts of different groups differ at their
first token, and so do the questions of one group, so a prompt shares exactly its group's system
prompt with earlier prompts of that group and nothing with any other group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workloads.base import (
    WorkloadParams,
    check_distinct,
    check_fraction,
    check_non_negative_number,
)
from workloads.popularity import POPULARITY, probabilities
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, rng, token_ids


@dataclass
class SystemPromptParams(WorkloadParams):
    name: str = "system_prompt"
    family: str = "system_prompt"
    num_groups: int = 64  # --gsp-num-groups
    prompts_per_group: int = 16  # --gsp-prompts-per-group (the mean, under zipf)
    system_prompt_len: int = 2048  # --gsp-system-prompt-len
    question_len: int = 128  # --gsp-question-len
    output_len: int = 256  # --gsp-output-len
    range_ratio: float = 1.0  # lengths uniform in [ratio*L, L]; 1.0 = fixed
    group_distribution: str = "uniform"  # uniform | zipf (--gsp-group-distribution)
    zipf_alpha: float = 1.0  # --gsp-zipf-alpha
    ordered: bool = False  # --gsp-ordered; false = shuffled
    # samples per prompt: n > 1 makes a three-level tree (system prompt, question, samples whose
    # scripted replies differ from their first token), as tree-of-thought style sampling does
    n: int = 1

    positive = (
        "num_groups",
        "prompts_per_group",
        "system_prompt_len",
        "question_len",
        "output_len",
        "n",
    )
    choices = {"group_distribution": tuple(POPULARITY.names())}

    def prompt_tokens_estimate(self) -> int:
        per_prompt = self.system_prompt_len + self.question_len
        return self.num_groups * self.prompts_per_group * self.n * per_prompt

    def requests_estimate(self) -> int:
        return self.num_groups * self.prompts_per_group * self.n

    def check(self) -> None:
        check_fraction(self, "range_ratio")
        check_non_negative_number(self, "zipf_alpha")


def draw_lengths(r: np.random.Generator, length: int, ratio: float, size: int) -> np.ndarray:
    """GSP's lengths: uniform integers in [max(1, int(ratio*L)), L]."""
    return r.integers(max(1, int(length * ratio)), length, size=size, endpoint=True)


def generate_system_prompt(p: SystemPromptParams, seed: int, space: TokenSpace) -> list[Request]:
    check_distinct("num_groups", p.num_groups, space, "system prompts")
    total = p.num_groups * p.prompts_per_group
    r = rng(seed, "system_prompt")
    if p.group_distribution == "uniform":
        groups = np.repeat(np.arange(p.num_groups), p.prompts_per_group)
    else:
        groups = np.sort(
            r.choice(
                p.num_groups,
                size=total,
                p=probabilities(p.group_distribution, p.num_groups, p.zipf_alpha),
            )
        )
    if not p.ordered:
        groups = r.permutation(groups)
    counts = np.bincount(groups, minlength=p.num_groups)
    check_distinct("prompts_per_group", int(counts.max()), space, "questions in one group")
    system_lens = draw_lengths(r, p.system_prompt_len, p.range_ratio, p.num_groups)
    question_lens = draw_lengths(r, p.question_len, p.range_ratio, total)
    output_lens = draw_lengths(r, p.output_len, p.range_ratio, total)
    system_heads = distinct_heads(space, p.num_groups, seed, "system")
    systems = [
        token_ids(space, (seed, "system", g), int(system_lens[g]), head=int(system_heads[g]))
        for g in range(p.num_groups)
    ]
    question_heads = [
        distinct_heads(space, int(counts[g]), seed, "question", g) for g in range(p.num_groups)
    ]
    seen = np.zeros(p.num_groups, dtype=np.int64)  # prompts of each group so far
    out = []
    for index, g in enumerate(groups.tolist()):
        i = int(seen[g])
        question = token_ids(
            space,
            (seed, "question", g, i),
            int(question_lens[index]),
            head=int(question_heads[g][i]),
        )
        output_ids = as_tuple(token_ids(space, (seed, "output", g, i), int(output_lens[index])))
        out.append(
            Request(
                request_id=f"g{g}-q{i}",
                prompt_ids=as_tuple(np.concatenate([systems[g], question])),
                output_ids=output_ids,
                n=p.n,
                sample_output_ids=_samples(p, space, seed, (g, i), output_ids),
                shared_prefix_len=int(system_lens[g]) if i > 0 else 0,
                tags={"group": g},
            )
        )
        seen[g] += 1
    return out


def _samples(
    p: SystemPromptParams, space: TokenSpace, seed: int, key: tuple[int, int], first: tuple
) -> tuple[tuple[int, ...], ...]:
    """n > 1: one scripted reply per sample, the first the request's own, each opening with a
    distinct token so the samples diverge at their first output token; n = 1: none."""
    if p.n == 1:
        return ()
    heads = distinct_heads(space, p.n, seed, "sample", *key)
    rest = (
        as_tuple(token_ids(space, (seed, "sample", *key, s), len(first), head=int(heads[s])))
        for s in range(1, p.n)
    )
    return (first, *rest)
