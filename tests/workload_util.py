"""Helpers for the workload tests: small parameter sets and a brute-force prefix checker that is
independent of workloads.bounds (no hashing, plain token comparison)."""

from __future__ import annotations

import numpy as np

from workloads.base import FAMILIES, TokenSpace
from workloads.request import Request

SPACE = TokenSpace(vocab_size=32000, first_ordinary_id=1)

# One small parameter set per synthetic family (the trace and dataset families read files).
SMALL: dict[str, dict] = {
    "system_prompt": dict(
        num_groups=3, prompts_per_group=4, system_prompt_len=40, question_len=8, output_len=4
    ),
    "fewshot": dict(
        num_tasks=3,
        k_shots=3,
        shot_len=10,
        instruction_len=6,
        question_len=5,
        output_len=3,
        questions_per_task=4,
    ),
    "multiturn": dict(
        num_users=3,
        num_rounds=3,
        system_prompt_len=20,
        user_history_len=10,
        question_len=5,
        answer_len=4,
    ),
    "parallel": dict(n=3, prompt_len=20, output_len=5, num_prompts=4),
    "rag": dict(
        num_prompts=10,
        num_docs=5,
        doc_len=12,
        docs_per_request=2,
        system_prompt_len=8,
        question_len=4,
        output_len=3,
    ),
    "unique": dict(num_prompts=12, prompt_len=16, output_len=4),
    "trace": dict(max_requests=12, path="mooncake/conversation_trace.jsonl"),
}


def params(family: str, **overrides):
    values = {**SMALL.get(family, {}), **overrides}
    return FAMILIES.get(family).params_cls(**values)


def common_prefix(a, b) -> int:
    a, b = np.asarray(a), np.asarray(b)
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if len(diff) else m


def brute_shared(requests: list[Request]) -> list[int]:
    """Longest common prefix of each prompt with every earlier prompt and with every earlier
    reply-bearing turn named as `after` (prompt + reply minus its final token)."""
    chained = {r.after for r in requests if r.after}
    content: list[tuple[int, ...]] = []
    out = []
    for r in requests:
        out.append(max((common_prefix(r.prompt_ids, c) for c in content), default=0))
        content.append(tuple(r.prompt_ids))
        if r.request_id in chained:
            content.append(tuple(r.prompt_ids) + tuple(r.output_ids or ())[:-1])
    return out


GOOD = {
    "id": "ok",
    "conversations": [
        {"from": "human", "value": "Hi there"},
        {"from": "gpt", "value": "Hello, how can I help you today?"},
    ],
}


def msg(role, text):
    return {"from": role, "value": text}


# A real dump's oddities (ShareGPT_V3 has each of these): skipped and counted, never fatal.
DUMP = [
    GOOD,
    {"id": "empty", "conversations": []},
    {
        "id": "assistant-first",
        "conversations": [msg("gpt", "Sure, here it is."), msg("human", "Thanks a lot")],
    },
    {"id": "lone", "conversations": [msg("human", "Is anyone there at all?")]},
    {
        "id": "bing",
        "conversations": [msg("human", "Search the web"), msg("bing", "Searching for you now")],
    },
    {"id": "short", "conversations": [msg("human", "x"), msg("gpt", "ok")]},
    {
        "id": "long",
        "conversations": [msg("human", "word " * 1500), msg("gpt", "That is a lot of words.")],
    },
    {
        "id": "two-turns",
        "conversations": [
            msg("system", "Be brief."),
            msg("human", "Name a colour of the sky."),
            msg("gpt", "Blue, on a clear day."),
            msg("human", "And at sunset?"),
            msg("gpt", "Orange and red, mostly."),
            msg("human", "unanswered last question"),
        ],
    },
]
