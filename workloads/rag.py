"""`rag`: retrieved documents in a prompt template (LMCache long_doc_qa; docs/benchmarking.md §3.5).

    static_first:   [header] system | doc_a | doc_b | ... | question      (shared content leads)
    question_first: [header] question | system | doc_a | doc_b | ...    (only the header is shared)

`header_len` > 0 puts a chat template's fixed header (the role tokens a chat template writes
before any content) in front of every prompt, so even question-first prompts share a few leading
tokens.

Documents come from a pool with uniform or Zipf popularity; `doc_order` decides how the retrieved
documents are laid out (popularity rank, id, or retrieval = random), and so how much prefix two
requests share: S plus doc_len per leading document an earlier request had in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from workloads.base import (
    WorkloadParams,
    check_distinct,
    check_non_negative_number,
    fail,
)
from workloads.popularity import POPULARITY, probabilities
from workloads.registry import Registry
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, distinct_heads, rng, token_ids

DOC_ORDERS: Registry = Registry("rag doc_order")
LAYOUTS: Registry = Registry("rag layout")


@DOC_ORDERS.register("popularity")
def _by_popularity(ranks: np.ndarray, rank_to_doc: np.ndarray, r: np.random.Generator) -> list[int]:
    return rank_to_doc[np.sort(ranks)].tolist()


@DOC_ORDERS.register("sorted_id")
def _by_id(ranks: np.ndarray, rank_to_doc: np.ndarray, r: np.random.Generator) -> list[int]:
    return sorted(rank_to_doc[ranks].tolist())


@DOC_ORDERS.register("retrieval")
def _as_retrieved(ranks: np.ndarray, rank_to_doc: np.ndarray, r: np.random.Generator) -> list[int]:
    return rank_to_doc[r.permutation(ranks)].tolist()


class Layout(NamedTuple):
    build: Callable[[np.ndarray, list[np.ndarray], np.ndarray], np.ndarray]
    static_leads: bool  # False: the per-request question comes first, so nothing is shared


LAYOUTS.add(
    "static_first",
    Layout(lambda system, docs, question: np.concatenate([system, *docs, question]), True),
)
LAYOUTS.add(
    "question_first",
    Layout(lambda system, docs, question: np.concatenate([question, system, *docs]), False),
)


@dataclass
class RagParams(WorkloadParams):
    name: str = "rag"
    family: str = "rag"
    num_prompts: int = 32
    num_docs: int = 16
    doc_len: int = 256
    docs_per_request: int = 3
    doc_popularity: str = "uniform"  # uniform | zipf
    zipf_alpha: float = 1.0
    doc_order: str = "retrieval"  # popularity | sorted_id | retrieval
    system_prompt_len: int = 64  # 0: no system prompt
    question_len: int = 32
    output_len: int = 16
    layout: str = "static_first"  # static_first | question_first
    header_len: int = 0  # a chat template's fixed leading tokens, shared by every prompt

    positive = (
        "num_prompts",
        "num_docs",
        "doc_len",
        "docs_per_request",
        "question_len",
        "output_len",
    )
    non_negative = ("system_prompt_len", "header_len")
    choices = {
        "doc_popularity": tuple(POPULARITY.names()),
        "doc_order": tuple(DOC_ORDERS.names()),
        "layout": tuple(LAYOUTS.names()),
    }

    def prompt_tokens_estimate(self) -> int:
        return self.num_prompts * (
            self.header_len
            + self.system_prompt_len
            + self.docs_per_request * self.doc_len
            + self.question_len
        )

    def requests_estimate(self) -> int:
        return self.num_prompts

    def check(self) -> None:
        check_non_negative_number(self, "zipf_alpha")
        if self.docs_per_request > self.num_docs:
            raise fail(
                "docs_per_request", f"at most num_docs ({self.num_docs})", self.docs_per_request
            )
        # A huge alpha underflows the tail's weights to 0, and a draw without replacement then
        # has too few documents to pick from: refuse it here, before anything is generated.
        if self.doc_popularity in POPULARITY and 0 < self.docs_per_request <= self.num_docs:
            with np.errstate(over="ignore", under="ignore"):
                weights = probabilities(self.doc_popularity, self.num_docs, self.zipf_alpha)
            usable = int(np.count_nonzero(weights > 0))
            if not np.isfinite(weights).all() or usable < self.docs_per_request:
                raise fail(
                    "zipf_alpha",
                    f"small enough that at least docs_per_request ({self.docs_per_request}) of "
                    f"the {self.num_docs} documents keep a non-zero weight (here {usable})",
                    self.zipf_alpha,
                )


def _shared(p: RagParams, layout: Layout, docs: list[int], seen: set[tuple[int, ...]]) -> int:
    """Tokens shared with earlier prompts: the header, then nothing ahead of a question, else
    S + leading docs."""
    if not seen:
        return 0
    if not layout.static_leads:
        return p.header_len
    common = max(j for j in range(p.docs_per_request + 1) if tuple(docs[:j]) in seen)
    return p.header_len + p.system_prompt_len + common * p.doc_len


def generate_rag(p: RagParams, seed: int, space: TokenSpace) -> list[Request]:
    check_distinct("num_docs", p.num_docs, space, "documents")
    check_distinct("num_prompts", p.num_prompts, space, "questions")
    r = rng(seed, "rag")
    rank_to_doc = r.permutation(p.num_docs)  # popularity rank is not the id, so the orders differ
    weights = probabilities(p.doc_popularity, p.num_docs, p.zipf_alpha)
    system = token_ids(space, (seed, "system"), p.system_prompt_len)
    header = token_ids(space, (seed, "header"), p.header_len)
    doc_heads = distinct_heads(space, p.num_docs, seed, "doc")
    pool = [
        token_ids(space, (seed, "doc", d), p.doc_len, head=int(doc_heads[d]))
        for d in range(p.num_docs)
    ]
    question_heads = distinct_heads(space, p.num_prompts, seed, "question")
    order_docs, layout = DOC_ORDERS.get(p.doc_order), LAYOUTS.get(p.layout)
    seen: set[tuple[int, ...]] = set()
    out = []
    for i in range(p.num_prompts):
        docs = order_docs(
            r.choice(p.num_docs, size=p.docs_per_request, replace=False, p=weights), rank_to_doc, r
        )
        question = token_ids(
            space, (seed, "question", i), p.question_len, head=int(question_heads[i])
        )
        shared = _shared(p, layout, docs, seen)
        seen.update(tuple(docs[:j]) for j in range(p.docs_per_request + 1))
        out.append(
            Request(
                request_id=f"q{i}",
                prompt_ids=as_tuple(
                    np.concatenate(
                        [header, layout.build(system, [pool[d] for d in docs], question)]
                    )
                ),
                output_ids=as_tuple(token_ids(space, (seed, "output", i), p.output_len)),
                shared_prefix_len=shared,
                tags={"docs": docs},
            )
        )
    return out
