"""`trace`: Mooncake JSONL replay (docs/benchmarking.md §3.7, §10).

Each line is {"timestamp" (ms), "input_length", "output_length", "hash_ids"}. Hash id h expands
to its own block of `block_size` tokens, token j drawn from the stream keyed (seed, "trace", h, j),
so equal leading ids give equal leading tokens. The prompt is the concatenation cut to
input_length (the last block is partial), stored as a compact `array('i')` (4 bytes a token; a whole
trace holds ~1.5e8 prompt tokens, 1.2 GB more as tuples of shared ints):

    hash_ids [0, 7, 9], input_length 1300, block 512:  |-- block 0 --|-- block 7 --|-- 9 (276) --|
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from workloads.base import (
    WorkloadParams,
    check_non_negative_number,
    fail,
    json_object,
    resolve_data_path,
)
from workloads.errors import BadInput
from workloads.progress import progress
from workloads.readers import iter_lines
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, stream_keys, token_block, token_streams

# The shipped traces' workload names and files: a run under one of these names replays that file.
SHIPPED = {
    "mooncake_conversation": "mooncake/conversation_trace.jsonl",
    "mooncake_synthetic": "mooncake/synthetic_trace.jsonl",
}


@dataclass
class TraceFileParams(WorkloadParams):
    """What every trace-file family shares (Mooncake's here, Qwen-Bailian's in bailian.py): the
    file, how much of it, how fast; the runs carry its name (default: the file's stem)."""

    name: str = ""  # empty: the trace file's stem
    family: str = ""
    path: str = ""  # relative: package data dir, then cwd
    block_size: int = 1  # tokens per hash id
    max_requests: int | None = None  # the first N lines; None = all
    slowdown: float = 1.0  # arrival_s = the line's time in seconds * slowdown

    positive = ("block_size",)
    optional_positive = ("max_requests",)
    path_is = "a trace file path"  # what `path` must be, as the error says it

    def __post_init__(self) -> None:
        if not self.name and isinstance(self.path, str):
            self.name = Path(self.path).stem

    def check(self) -> None:
        check_non_negative_number(self, "slowdown", positive=True)
        if not isinstance(self.path, str) or not self.path:
            raise fail("path", self.path_is, self.path)


@dataclass
class TraceParams(TraceFileParams):
    """A Mooncake-format trace. A user's own trace is a YAML of its own (workloads/README.md):
    its runs carry its name (default: the file's stem) and replay the whole file by default."""

    family: str = "trace"
    path: str = "mooncake/conversation_trace.jsonl"
    block_size: int = 512  # tokens per hash_id; timestamps in ms

    def check(self) -> None:
        super().check()
        shipped = SHIPPED.get(self.name)
        if shipped is not None and Path(self.path) != Path(shipped):
            # Results would carry the shipped trace's name (and its max_requests) for other data.
            raise BadInput(
                f"workload.path {self.path!r} is not the trace of workload {self.name}; for your "
                "own trace set workload.name too, or write a workload YAML (workloads/README.md)"
            )


MAX_HASH_ID = 2**63  # ids become uint64 stream keys; larger ones overflow
MAX_LENGTH = 2**31  # tokens of one prompt or output: far beyond any context, and fits int32


class TraceRow(NamedTuple):
    line_no: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int_field(obj: dict, key: str, where: str, minimum: int) -> int:
    if key not in obj:
        raise BadInput(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_LENGTH:
        raise BadInput(
            f"{where}: {key} must be an integer in [{minimum}, {MAX_LENGTH}], got {value!r}"
        )
    return value


def parse_line(line: str, path: str | Path, line_no: int, block_size: int) -> TraceRow:
    """One trace line; every problem raises BadInput starting with `file:line:`."""
    where = f"{path}:{line_no}"
    return parse_fields(json_object(line, where), where, line_no, block_size, "ms")


def parse_fields(obj: dict, where: str, line_no: int, block_size: int, unit: str) -> TraceRow:
    """The fields a Mooncake line and a Qwen-Bailian line share; `unit` is the timestamp's (ms or
    s: Bailian's), the row holds ms."""
    timestamp = obj.get("timestamp")
    if (
        isinstance(timestamp, bool)
        or not isinstance(timestamp, (int, float))
        or not 0 <= timestamp < math.inf
    ):
        raise BadInput(
            f"{where}: timestamp must be a non-negative number of {unit} (finite), got {timestamp!r}"
        )
    input_length = _int_field(obj, "input_length", where, 1)
    output_length = _int_field(obj, "output_length", where, 1)
    hash_ids = obj.get("hash_ids")
    if (
        not isinstance(hash_ids, list)
        or not hash_ids
        or not all(type(h) is int for h in hash_ids)  # JSON gives int, bool or float
        or not 0 <= min(hash_ids) <= max(hash_ids) < MAX_HASH_ID
    ):
        raise BadInput(f"{where}: hash_ids must be a non-empty list of integers in [0, 2**63)")
    k = len(hash_ids)
    if not (k - 1) * block_size < input_length <= k * block_size:
        raise BadInput(
            f"{where}: input_length {input_length} does not fit {k} hash_ids of {block_size} tokens"
        )
    ms = float(timestamp) * (1000.0 if unit == "s" else 1.0)
    return TraceRow(line_no, ms, input_length, output_length, tuple(hash_ids))


def read_trace(path: str, block_size: int = 512, max_requests: int | None = None) -> list[TraceRow]:
    """The first `max_requests` rows (all if None); blank lines are skipped."""
    resolved = resolve_data_path(path, "trace file")
    rows: list[TraceRow] = []
    for line_no, line in iter_lines(resolved, "trace file"):
        if max_requests is not None and len(rows) >= max_requests:
            break
        if line.strip():
            rows.append(parse_line(line, resolved, line_no, block_size))
    return rows


DRAW_BLOCKS = 64  # new blocks drawn together: one vectorised draw per ~64 blocks, not per row


def prompt_arrays(
    rows: list[TraceRow], seed: int, space: TokenSpace, block_size: int
) -> Iterator[np.ndarray]:
    """Each row's prompt as an int32 array (lazily: a whole trace is ~10^8 tokens). Each hash id is
    expanded once, with the other ids first named by the same group of rows (a row names ~10 new
    ids: drawing per row was mostly numpy's per-call cost). A block that a later group names
    again is kept until its last row (the re-used blocks alive at any time are a few MB)."""
    last_row = {h: i for i, row in enumerate(rows) for h in row.hash_ids}
    ids = np.fromiter(last_row, dtype=np.uint64, count=len(last_row))
    key_of = dict(zip(last_row, stream_keys((seed, "trace"), ids).tolist()))
    kept: dict[int, np.ndarray] = {}
    for lo, hi in _draw_groups(rows, DRAW_BLOCKS):
        new = list(dict.fromkeys(h for row in rows[lo:hi] for h in row.hash_ids if h not in kept))
        keys = np.array([key_of[h] for h in new], dtype=np.uint64)
        kept.update(zip(new, token_block(space, keys, block_size, np.int32)))
        for i in range(lo, hi):
            row = rows[i]
            blocks = [kept[h] for h in row.hash_ids]
            tail = row.input_length - (len(blocks) - 1) * block_size
            yield np.concatenate([*blocks[:-1], blocks[-1][:tail]])
            for h in row.hash_ids:
                if last_row[h] == i:
                    kept.pop(h, None)
        for h in new:
            if h in kept:  # named after this group: a copy, not a view holding the whole draw
                kept[h] = kept[h].copy()


def _draw_groups(rows: list[TraceRow], num_new: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges [lo, hi), each first naming at least `num_new` hash ids (the last
    range may name fewer)."""
    seen: set[int] = set()
    lo = count = 0
    for i, row in enumerate(rows):
        fresh = set(row.hash_ids) - seen
        seen |= fresh
        count += len(fresh)
        if count >= num_new:
            yield lo, i + 1
            lo, count = i + 1, 0
    if lo < len(rows):
        yield lo, len(rows)


def compact_ids(ids: np.ndarray) -> array:
    """Token ids as a read-only-by-convention `array('i')`: a sequence of Python ints (indexing,
    iteration, `tolist`) that numpy reads without copying."""
    out = array("i")
    out.frombytes(np.ascontiguousarray(ids, dtype=np.int32).data.cast("B"))  # one copy
    return out


def shared_prefix_lens(rows: list[TraceRow], block_size: int) -> list[int]:
    """Tokens each prompt shares with earlier ones, from the id chains: a trie over hash ids whose
    nodes remember how many tokens of their block any prompt covered (partial last blocks).
    Accidental equal tokens across different blocks (probability ~1/V) are not counted."""
    root: dict[int, list] = {}  # hash id -> [tokens covered, children]
    out = []
    for row in rows:
        last = len(row.hash_ids) - 1
        tail = row.input_length - last * block_size  # the last block's tokens; the others are full
        node, shared, matching = root, 0, True
        for i, h in enumerate(row.hash_ids):
            length = block_size if i < last else tail
            child = node.get(h)
            if child is None:  # the match ends here; the rest of the chain is new
                child = node[h] = [length, {}]
                matching = False
            else:
                if matching:
                    covered = child[0] if child[0] < length else length
                    shared += covered
                    matching = covered == block_size
                if child[0] < length:
                    child[0] = length
            node = child[1]
        out.append(shared)
    return out


def _replies(rows: list[TraceRow], seed: int, space: TokenSpace) -> Iterator[tuple[int, ...]]:
    """Each row's scripted reply, the stream (seed, "trace-output", line), drawn a chunk of rows
    at a time."""
    chunk = 512
    for lo in range(0, len(rows), chunk):
        part = rows[lo : lo + chunk]
        lines = np.array([row.line_no for row in part], dtype=np.uint64)
        lengths = np.array([row.output_length for row in part], dtype=np.int64)
        flat = as_tuple(token_streams(space, stream_keys((seed, "trace-output"), lines), lengths))
        ends = np.cumsum(lengths).tolist()
        yield from (flat[e - n : e] for e, n in zip(ends, lengths.tolist()))


def generate_trace(p: TraceParams, seed: int, space: TokenSpace) -> list[Request]:
    rows = read_trace(p.path, p.block_size, p.max_requests)
    return trace_requests(rows, Path(p.path).stem, seed, space, p.block_size, p.slowdown)


def trace_requests(
    rows: list[TraceRow], stem: str, seed: int, space: TokenSpace, block_size: int, slowdown: float
) -> list[Request]:
    """Each row expanded to a Request (`stem-LINE`), arriving at its timestamp times `slowdown`
    (the Mooncake and the Qwen-Bailian readers share it)."""
    shared = shared_prefix_lens(rows, block_size)
    return [
        Request(
            request_id=f"{stem}-{row.line_no}",
            prompt_ids=compact_ids(prompt),
            output_ids=reply,
            arrival_s=row.timestamp_ms / 1000.0 * slowdown,
            shared_prefix_len=shared_i,
            tags={"line": row.line_no, "num_blocks": len(row.hash_ids)},
        )
        for row, prompt, reply, shared_i in progress(
            zip(
                rows,
                prompt_arrays(rows, seed, space, block_size),
                _replies(rows, seed, space),
                shared,
            ),
            "expanding trace",
            "req",
            total=len(rows),
        )
    ]
