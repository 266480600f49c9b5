"""A run's workload as a public prefix trace: Mooncake (`timestamp` ms, `input_length`,
`output_length`, `hash_ids`) or Qwen-Bailian (the same plus `chat_id`, `parent_chat_id`, `turn`,
`type`, timestamp in seconds). The requests are generated again from the run's manifest (the
family, its parameters, the seed: generation is deterministic) and sent in the order and at the
times the run released them (its request table's `arrival_s`).

Hash ids are chained: block k's id names (block k-1's id, block k's tokens), numbered in order of
first appearance, so two prompts share their first j ids exactly when they share their first j
blocks, which is all a trace reader can reproduce. A tenant's salt starts its own chain (tenants
never share). Token ids themselves are not kept; only the block structure is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from engines.model.config import ModelConfig
from harness.config.errors import BadInput
from harness.config.tokenspace import token_space_for
from harness.export.run_view import RunView
from workloads.base import generate, params_from_mapping
from workloads.request import Request

TRACE_BLOCK = 16  # tokens per hash id: Bailian's, and vLLM's default block size


class ChainIds:
    """Sequential ids of (parent id, block tokens) pairs."""

    def __init__(self) -> None:
        self._ids: dict[tuple[object, tuple[int, ...]], int] = {}

    def of(self, prompt: Sequence[int], salt: str | None, block: int) -> list[int]:
        parent: object = ("salt", salt)
        out = []
        for lo in range(0, len(prompt), block):
            key = (parent, tuple(prompt[lo : lo + block]))
            parent = self._ids.setdefault(key, len(self._ids))
            out.append(parent)
        return out


def regenerate(run: RunView) -> list[Request]:
    """The run's workload requests, generated again from its manifest."""
    try:
        params = params_from_mapping(run.group("workload"))
        space = token_space_for(ModelConfig(**run.group("model")))
        return generate(params, int(run.config.get("seed") or 0), space)
    except (TypeError, ValueError, KeyError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise BadInput(f"{run.path}: cannot generate its workload again ({first})") from None


def released(run: RunView, requests: list[Request]) -> list[tuple[float, Request]]:
    """(release time in s, request) in release order: the run's measured arrival where its table
    has the request, else the generator's."""
    table = run.requests.assign(arrival_s=run.column("arrival_s")).drop_duplicates("request_id")
    times = {
        str(k): float(v) for k, v in zip(table["request_id"], table["arrival_s"]) if v == v
    }  # v == v: NaN (no measured arrival) keeps the generator's
    timed = [(times.get(r.request_id, r.arrival_s), i, r) for i, r in enumerate(requests)]
    return [(t, r) for t, _, r in sorted(timed, key=lambda x: (x[0], x[1]))]


def trace_lines(run: RunView, kind: str) -> Iterator[str]:
    """One JSON line per request; kind is mooncake or bailian."""
    requests = regenerate(run)
    if not all(len(r.prompt_ids) for r in requests):
        raise BadInput(f"{run.path}: a request with an empty prompt cannot be a trace line")
    chains = ChainIds()
    chat_of: dict[str, int] = {}  # request id -> its line's chat_id
    last_of_session: dict[str | None, str] = {}  # session -> its latest request id so far
    for chat_id, (t, r) in enumerate(released(run, requests)):
        row: dict[str, object] = {
            "timestamp": round(t * 1000.0, 3) if kind == "mooncake" else round(t, 6),
            "input_length": len(r.prompt_ids),
            "output_length": r.output_len,
            "hash_ids": chains.of(r.prompt_ids, r.salt, TRACE_BLOCK),
        }
        if kind == "bailian":
            parent = r.after if r.after is not None else last_of_session.get(r.session_id)
            row = {
                "chat_id": chat_id,
                "parent_chat_id": chat_of.get(parent, -1) if parent is not None else -1,
                **row,
                "type": "text",
                "turn": r.turn + 1,  # Bailian counts turns from 1
            }
            chat_of[r.request_id] = chat_id
            if r.session_id is not None:
                last_of_session[r.session_id] = r.request_id
        yield json.dumps(row, separators=(",", ":"))
