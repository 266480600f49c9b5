"""`prompts`: the user's own prompts, one JSON object per line.

    {"prompt": "text"} or {"prompt_ids": [ids]}    required, one of the two
    "output_len": 64                                optional (default: workload.output_len)
    "session": "user-7"                             optional: lines of one session are its turns
    "arrival_s": 1.5                                optional: send time (non-decreasing in file)

Text is encoded with `tokenizer` (raw, or as one ChatML user turn with `chat_template`); ids are
used as given, folded into a smaller random-weight model's vocabulary. A session's turn k is sent
`think_s` after turn k-1 finishes; its own `arrival_s` is then ignored. Replies are scripted from
a seeded stream, so both engines decode the same tokens.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from workloads.base import (
    Generated,
    WorkloadParams,
    check_non_negative_number,
    fail,
    json_object,
    resolve_data_path,
)
from workloads.dataset import fold_ids
from workloads.errors import BadInput
from workloads.progress import progress
from workloads.readers import iter_lines
from workloads.request import Request
from workloads.tokens import TokenSpace, as_tuple, token_ids

FIELDS = ("prompt", "prompt_ids", "output_len", "session", "arrival_s")


@dataclass
class PromptsParams(WorkloadParams):
    name: str = ""  # empty: the file's stem
    family: str = "prompts"
    path: str = "prompts_sample.jsonl"  # relative: package data dir, then cwd
    tokenizer: str = "smollm2-135m"  # or the path of a local tokenizer.json
    chat_template: bool = False  # wrap each text prompt as one ChatML user turn
    output_len: int = 64  # for lines without "output_len"
    max_requests: int | None = None  # the first N lines; None = all
    think_s: float = 0.0

    positive = ("output_len",)
    optional_positive = ("max_requests",)

    def __post_init__(self) -> None:
        if not self.name and isinstance(self.path, str):
            self.name = Path(self.path).stem

    def check(self) -> None:
        check_non_negative_number(self, "think_s")
        if not isinstance(self.path, str) or not self.path:
            raise fail("path", "a prompt file path (JSONL)", self.path)
        if not isinstance(self.chat_template, bool):
            raise fail("chat_template", "true or false", self.chat_template)


class PromptLine(NamedTuple):
    line_no: int
    prompt: str | None
    prompt_ids: tuple[int, ...] | None
    output_len: int | None
    session: str | None
    arrival_s: float | None


def parse_line(line: str, path: str | Path, line_no: int) -> PromptLine:
    """One line; every problem raises BadInput starting with `file:line:` and naming the field."""
    where = f"{path}:{line_no}"
    obj = json_object(line, where)
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise BadInput(f"{where}: unknown field {unknown[0]!r}; valid: {', '.join(FIELDS)}")
    prompt, ids = obj.get("prompt"), obj.get("prompt_ids")
    if (prompt is None) == (ids is None):
        raise BadInput(f"{where}: needs exactly one of 'prompt' (text) and 'prompt_ids' (ids)")
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise BadInput(f"{where}: prompt must be a non-empty string, got {prompt!r:.40}")
    if ids is not None and (
        not isinstance(ids, list) or not ids or not all(_is_int(i) and i >= 0 for i in ids)
    ):
        raise BadInput(f"{where}: prompt_ids must be a non-empty list of non-negative integers")
    output_len = obj.get("output_len")
    if output_len is not None and (not _is_int(output_len) or output_len <= 0):
        raise BadInput(f"{where}: output_len must be a positive integer, got {output_len!r}")
    session = obj.get("session")
    if session is not None and not isinstance(session, (str, int)):
        raise BadInput(f"{where}: session must be a string or an integer, got {session!r}")
    arrival_s = obj.get("arrival_s")
    if arrival_s is not None and (
        isinstance(arrival_s, bool)
        or not isinstance(arrival_s, (int, float))
        or not 0 <= arrival_s < math.inf
    ):
        raise BadInput(
            f"{where}: arrival_s must be a non-negative number (finite), got {arrival_s!r}"
        )
    return PromptLine(
        line_no,
        prompt,
        tuple(ids) if ids is not None else None,
        output_len,
        None if session is None else str(session),
        None if arrival_s is None else float(arrival_s),
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_prompts(path: str, max_requests: int | None = None) -> tuple[Path, list[PromptLine]]:
    """The first `max_requests` non-blank lines (all if None), arrival times non-decreasing."""
    resolved = resolve_data_path(path, "prompt file")
    rows: list[PromptLine] = []
    last_s = 0.0
    for line_no, line in iter_lines(resolved, "prompt file"):
        if max_requests is not None and len(rows) >= max_requests:
            break
        if not line.strip():
            continue
        row = parse_line(line, resolved, line_no)
        if row.arrival_s is not None and row.arrival_s < last_s:
            raise BadInput(
                f"{resolved}:{line_no}: arrival_s {row.arrival_s} is earlier than the line "
                f"before ({last_s}); sort the file by arrival_s"
            )
        last_s = row.arrival_s if row.arrival_s is not None else last_s
        rows.append(row)
    if not rows:
        raise BadInput(f"{resolved}: no prompt lines")
    return resolved, rows


def _encode(row: PromptLine, p: PromptsParams, tok) -> list[int]:
    if row.prompt_ids is not None:
        return list(row.prompt_ids)
    assert row.prompt is not None  # a prompt line holds text or token ids (parse_line)
    if p.chat_template:
        from workloads.tokenizer import render_chatml

        return tok.encode(render_chatml([{"role": "user", "content": row.prompt}]))
    return tok.encode(row.prompt)


# The last few files' folded ids, keyed by the file's identity and what the encoding reads: a
# process that runs one file many times (harness.advise's grid) encodes it once (~1 s per 1,000
# long prompts). Requests are made afresh each time; only the immutable id tuples are shared.
_ENCODED: dict[tuple[object, ...], tuple[tuple[int, ...], ...]] = {}
_ENCODED_FILES = 4


def _encoded_file(
    path: Path, rows: list[PromptLine], p: PromptsParams, space: TokenSpace
) -> tuple[tuple[int, ...], ...]:
    stat = path.stat()
    key = (
        str(path),
        stat.st_size,
        stat.st_mtime_ns,
        len(rows),
        p.tokenizer,
        p.chat_template,
        space,
    )
    if key not in _ENCODED:
        from workloads.tokenizer import load

        tok = load(p.tokenizer) if any(r.prompt is not None for r in rows) else None
        folded = []
        for row in progress(rows, "encoding prompts", "prompt"):
            ids = fold_ids(_encode(row, p, tok), space)
            if not ids:
                raise BadInput(f"{path}:{row.line_no}: prompt encodes to no tokens")
            folded.append(ids)
        if len(_ENCODED) >= _ENCODED_FILES:
            _ENCODED.pop(next(iter(_ENCODED)))
        _ENCODED[key] = tuple(folded)
    return _ENCODED[key]


def generate_prompts(p: PromptsParams, seed: int, space: TokenSpace) -> Generated:
    from workloads.bounds import shared_prefix_lens

    path, rows = read_prompts(p.path, p.max_requests)
    encoded = _encoded_file(path, rows, p, space)
    last_turn: dict[str, Request] = {}
    requests: list[Request] = []
    for row, ids in zip(rows, encoded):
        output_len = row.output_len or p.output_len
        previous = last_turn.get(row.session) if row.session is not None else None
        req = Request(
            request_id=f"{path.stem}-{row.line_no}",
            prompt_ids=ids,
            output_ids=as_tuple(
                token_ids(space, (seed, "prompts-output", row.line_no), output_len)
            ),
            arrival_s=row.arrival_s or 0.0,
            session_id=row.session,
            turn=previous.turn + 1 if previous else 0,
            after=previous.request_id if previous else None,
            think_s=p.think_s if previous else 0.0,
            tags={"line": row.line_no},
        )
        if row.session is not None:
            last_turn[row.session] = req
        requests.append(req)
    requests = [
        dataclasses.replace(r, shared_prefix_len=n)
        for r, n in zip(requests, shared_prefix_lens(requests))
    ]
    return Generated(requests, {"input_records": len(rows), "input_skipped": 0})
