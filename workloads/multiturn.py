"""`multiturn`: users in multi-round QA sessions (LMCache multi-round QA; docs/benchmarking.md §3.3).

    turn 1:   system | history[u] | q1
    turn 2:   system | history[u] | q1 | a1 | q2          (after = turn 1, think_s)
    turn k+1: prompt of turn k | answer k | question k+1

The system prompt is shared by all users, the history is per user (different first tokens). The
answers are deterministic synthetic tokens seeded by (seed, user, round), so both policies see the
same histories; turn k+1 can reuse turn k's prompt + answer minus its final token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workloads.base import (
    WorkloadParams,
    check_distinct,
    check_non_negative_number,
)
from workloads.request import Request
from workloads.sessions import ORDERS, interleave
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, token_ids


@dataclass
class MultiturnParams(WorkloadParams):
    name: str = "multiturn"
    family: str = "multiturn"
    num_users: int = 10  # --num-users
    num_rounds: int = 5  # --num-rounds
    system_prompt_len: int = 1000  # --shared-system-prompt
    user_history_len: int = 2000  # --user-history-prompt
    question_len: int = 32
    answer_len: int = 100  # --answer-len
    think_s: float = 0.0  # gap between an answer and the user's next question
    order: str = "round_robin"  # round_robin | sequential

    positive = ("num_users", "num_rounds", "question_len", "answer_len")
    non_negative = ("system_prompt_len", "user_history_len")
    choices = {"order": tuple(ORDERS.names())}

    def prompt_tokens_estimate(self) -> int:
        r = self.num_rounds  # turn t holds t questions and t - 1 answers after the shared part
        per_user = (
            r * (self.system_prompt_len + self.user_history_len)
            + self.question_len * r * (r + 1) // 2
        )
        return self.num_users * (per_user + self.answer_len * r * (r - 1) // 2)

    def check(self) -> None:
        check_non_negative_number(self, "think_s")


def _session(
    p: MultiturnParams, seed: int, space: TokenSpace, u: int, system: np.ndarray, heads
) -> list[Request]:
    history = token_ids(
        space, (seed, "history", u), p.user_history_len, head=int(heads["history"][u])
    )
    context = np.concatenate([system, history])
    turns, previous = [], None
    for k in range(p.num_rounds):
        head = int(heads["question"][u]) if k == 0 else None  # round-1 prompts differ per user
        prompt = np.concatenate(
            [context, token_ids(space, (seed, "question", u, k), p.question_len, head=head)]
        )
        answer = token_ids(space, (seed, "answer", u, k), p.answer_len)
        if previous is None:  # user 0 goes first in either order; the others find the system prompt
            shared = p.system_prompt_len if u > 0 else 0
        else:
            shared = len(previous.prompt_ids) + p.answer_len - 1
        req = Request(
            request_id=f"u{u}-r{k}",
            prompt_ids=as_tuple(prompt),
            output_ids=as_tuple(answer),
            session_id=f"u{u}",
            turn=k,
            after=previous.request_id if previous else None,
            think_s=p.think_s if previous else 0.0,
            shared_prefix_len=shared,
            tags={"user": u},
        )
        turns.append(req)
        previous, context = req, np.concatenate([prompt, answer])
    return turns


def generate_multiturn(p: MultiturnParams, seed: int, space: TokenSpace) -> list[Request]:
    check_distinct("num_users", p.num_users, space, "users")
    system = token_ids(space, (seed, "system"), p.system_prompt_len)
    heads = {
        "history": distinct_heads(space, p.num_users, seed, "history"),
        "question": distinct_heads(space, p.num_users, seed, "question"),
    }
    sessions = [_session(p, seed, space, u, system, heads) for u in range(p.num_users)]
    return interleave(sessions, p.order)
