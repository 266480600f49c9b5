"""`fewshot`: k-shot prompts per task (MMLU / HellaSwag style; docs/benchmarking.md §3.2).

prompt = instruction[task] + k shots from the task's pool + question. With `order_policy=fixed`
every question of a task shares instruction + k shots; `shuffled` (a random pick and order per
request) and `rotated` (a sliding window over the pool) show a different shot order breaking
prefix reuse at the first differing shot. Every shot, instruction and (per task) question starts
with its own first token, so the shared prefix is exactly instruction + the common leading shots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workloads.base import WorkloadParams, check_distinct, fail
from workloads.registry import Registry
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, rng, token_ids

SHOT_ORDERS: Registry = Registry("fewshot order_policy")


@SHOT_ORDERS.register("fixed")
def _fixed(pool_size: int, k: int, question: int, r: np.random.Generator) -> list[int]:
    return list(range(k))


@SHOT_ORDERS.register("shuffled")
def _shuffled(pool_size: int, k: int, question: int, r: np.random.Generator) -> list[int]:
    return r.choice(pool_size, size=k, replace=False).tolist()


@SHOT_ORDERS.register("rotated")
def _rotated(pool_size: int, k: int, question: int, r: np.random.Generator) -> list[int]:
    return [(question + j) % pool_size for j in range(k)]


@dataclass
class FewshotParams(WorkloadParams):
    name: str = "fewshot"
    family: str = "fewshot"
    num_tasks: int = 4  # MMLU --nsub
    k_shots: int = 5  # MMLU -k, HellaSwag --num-shots
    shot_len: int = 64
    instruction_len: int = 32  # 0: no instruction
    question_len: int = 48
    output_len: int = 8
    questions_per_task: int = 8
    pool_size: int | None = None  # examples per task; None = k_shots
    order_policy: str = "fixed"  # fixed | shuffled | rotated
    ordered: bool = True  # task by task; false = shuffled across tasks

    positive = (
        "num_tasks",
        "k_shots",
        "shot_len",
        "question_len",
        "output_len",
        "questions_per_task",
    )
    non_negative = ("instruction_len",)
    optional_positive = ("pool_size",)
    choices = {"order_policy": tuple(SHOT_ORDERS.names())}

    def prompt_tokens_estimate(self) -> int:
        shots = self.instruction_len + self.k_shots * self.shot_len + self.question_len
        return self.num_tasks * self.questions_per_task * shots

    def requests_estimate(self) -> int:
        return self.num_tasks * self.questions_per_task

    def check(self) -> None:
        if self.pool_size is not None and self.pool_size < self.k_shots:
            raise fail("pool_size", f"at least k_shots ({self.k_shots})", self.pool_size)


def generate_fewshot(p: FewshotParams, seed: int, space: TokenSpace) -> list[Request]:
    pool = p.pool_size or p.k_shots
    check_distinct("num_tasks", p.num_tasks * pool, space, "shots (num_tasks * pool_size)")
    check_distinct("questions_per_task", p.questions_per_task, space, "questions")
    r = rng(seed, "fewshot")
    instruction_heads = distinct_heads(space, p.num_tasks, seed, "instruction")
    shot_heads = distinct_heads(space, p.num_tasks * pool, seed, "shot").reshape(p.num_tasks, pool)
    instructions = [
        token_ids(
            space, (seed, "instruction", t), p.instruction_len, head=int(instruction_heads[t])
        )
        for t in range(p.num_tasks)
    ]
    shots = [
        [
            token_ids(space, (seed, "shot", t, s), p.shot_len, head=int(shot_heads[t, s]))
            for s in range(pool)
        ]
        for t in range(p.num_tasks)
    ]
    order = [(t, q) for t in range(p.num_tasks) for q in range(p.questions_per_task)]
    if not p.ordered:
        order = [order[i] for i in r.permutation(len(order))]
    choose = SHOT_ORDERS.get(p.order_policy)
    question_heads = [
        distinct_heads(space, p.questions_per_task, seed, "question", t) for t in range(p.num_tasks)
    ]
    seen: list[set[tuple[int, ...]]] = [
        set() for _ in range(p.num_tasks)
    ]  # shot-index prefixes sent
    out = []
    for t, q in order:
        picked = choose(pool, p.k_shots, q, r)
        common = max(
            (j for j in range(p.k_shots + 1) if tuple(picked[:j]) in seen[t]), default=None
        )
        shared = 0 if common is None else p.instruction_len + common * p.shot_len
        seen[t].update(tuple(picked[:j]) for j in range(p.k_shots + 1))
        question = token_ids(
            space, (seed, "question", t, q), p.question_len, head=int(question_heads[t][q])
        )
        prompt = np.concatenate([instructions[t], *(shots[t][s] for s in picked), question])
        out.append(
            Request(
                request_id=f"t{t}-q{q}",
                prompt_ids=as_tuple(prompt),
                output_ids=as_tuple(token_ids(space, (seed, "output", t, q), p.output_len)),
                shared_prefix_len=shared,
                tags={"task": t, "shots": picked},
            )
        )
    return out
