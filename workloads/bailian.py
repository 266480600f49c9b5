"""`bailian`: Qwen-Bailian trace replay (github.com/alibaba-edu/qwen-bailian-usagetraces-anon,
Apache-2.0; the format as its README and aiperf 0.13's `bailian_trace` loader read it).

Each line is {"chat_id", "parent_chat_id" (-1 for a session's first request), "timestamp"
(seconds), "input_length", "output_length", "type" (text/search/image/file), "turn" (from 1),
"hash_ids"}: 16-token blocks, each id a salted SipHash-2-4 of its block remapped to small
integers. A row carries its request's whole prompt (the history included), so every row is an
independent request at its timestamp; `chat_id` links give the session and `turn` its turn. Hash
ids expand to tokens exactly as the Mooncake reader's (workloads/trace.py): equal leading ids give
equal leading tokens, and at 16 tokens a block is vLLM's default, so APC's granularity replays
exactly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from workloads.base import (
    json_object,
    resolve_data_path,
)
from workloads.errors import BadInput
from workloads.readers import iter_lines
from workloads.request import Request
from workloads.tokens import TokenSpace
from workloads.trace import MAX_HASH_ID, TraceFileParams, TraceRow, parse_fields, trace_requests

BAILIAN_BLOCK = 16
TYPES = frozenset({"text", "search", "image", "file"})


@dataclass
class BailianParams(TraceFileParams):
    """A Qwen-Bailian-format trace (a user's own file; the published ones are Git LFS objects)."""

    family: str = "bailian"
    path: str = "bailian_sample.jsonl"
    block_size: int = BAILIAN_BLOCK  # tokens per hash id (the published traces: 16); times in s

    path_is = "a Qwen-Bailian trace file path"


@dataclass(frozen=True)
class BailianRow:
    row: TraceRow
    chat_id: int
    parent_chat_id: int
    turn: int
    kind: str


def _id_field(obj: dict, key: str, where: str, minimum: int) -> int:
    value = obj.get(key)
    if type(value) is not int or not minimum <= value < MAX_HASH_ID:
        raise BadInput(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def parse_bailian_line(line: str, path: str | Path, line_no: int, block_size: int) -> BailianRow:
    where = f"{path}:{line_no}"
    obj = json_object(line, where)
    chat_id = _id_field(obj, "chat_id", where, 0)
    parent = _id_field(obj, "parent_chat_id", where, -1)
    turn = _id_field(obj, "turn", where, 0)
    kind = obj.get("type", "text")
    if kind not in TYPES:
        raise BadInput(f"{where}: type must be one of {', '.join(sorted(TYPES))}, got {kind!r}")
    return BailianRow(
        parse_fields(obj, where, line_no, block_size, "s"), chat_id, parent, turn, kind
    )


def read_bailian(path: str, block_size: int, max_requests: int | None) -> list[BailianRow]:
    resolved = resolve_data_path(path, "Qwen-Bailian trace file")
    rows: list[BailianRow] = []
    seen: set[int] = set()
    for line_no, line in iter_lines(resolved, "Qwen-Bailian trace file"):
        if max_requests is not None and len(rows) >= max_requests:
            break
        if line.strip():
            row = parse_bailian_line(line, resolved, line_no, block_size)
            if row.chat_id in seen:
                raise BadInput(f"{resolved}:{line_no}: chat_id {row.chat_id} appears twice")
            seen.add(row.chat_id)
            rows.append(row)
    return rows


def session_roots(rows: list[BailianRow]) -> dict[int, int]:
    """chat_id -> the chat_id of its session's first request, following parent links (a parent
    outside the file, or a cycle, ends the walk: that request starts its own session)."""
    parent = {r.chat_id: r.parent_chat_id for r in rows}
    roots: dict[int, int] = {}
    for chat in parent:
        path, current = [], chat
        while current not in roots and parent.get(current, -1) in parent and current not in path:
            path.append(current)
            current = parent[current]
        root = roots.get(current, current)
        for node in (*path, current):
            roots[node] = root
    return roots


def generate_bailian(p: BailianParams, seed: int, space: TokenSpace) -> list[Request]:
    rows = read_bailian(p.path, p.block_size, p.max_requests)
    roots = session_roots(rows)
    stem = Path(p.path).stem
    expanded = trace_requests([r.row for r in rows], stem, seed, space, p.block_size, p.slowdown)
    return [
        dataclasses.replace(
            req,
            session_id=str(roots[r.chat_id]),
            turn=max(r.turn - 1, 0),  # prefixbench counts turns from 0
            tags={**req.tags, "chat_id": r.chat_id, "type": r.kind},
        )
        for r, req in zip(rows, expanded)
    ]
