"""`dataset`: ShareGPT-layout conversations from local JSON, JSONL or Parquet, offline.

Each conversation becomes a multi-turn session: turn k's prompt is the ChatML template over the
messages so far, its scripted reply the recorded answer (or `output_len` tokens of it). Ids are
built turn by turn, so turn k+1 starts with exactly turn k's prompt + reply. Records that are not
a chat are skipped and counted (workloads/sharegpt.py), and so are conversations whose first turn
fails vLLM's length filters; a later turn that fails them ends its conversation there.
`datasets` is imported lazily, with HF_DATASETS_OFFLINE=1: nothing touches the network.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from workloads.base import (
    Generated,
    WorkloadParams,
    check_non_negative_number,
    fail,
    json_object,
    resolve_data_path,
)
from workloads.errors import BadInput
from workloads.progress import progress
from workloads.readers import iter_lines, loads_json, open_regular, read_text
from workloads.registry import Registry
from workloads.request import Request
from workloads.sessions import ORDERS, interleave
from workloads.sharegpt import Conversation, length_problem, parse_records
from workloads.tokens import TokenSpace, token_ids

FORMATS: Registry = Registry("dataset file type")  # suffix -> datasets builder
for _suffix, _builder in ((".json", "json"), (".jsonl", "json"), (".parquet", "parquet")):
    FORMATS.add(_suffix, _builder)
END_OF_TURN = "<|im_end|>"


@dataclass
class DatasetParams(WorkloadParams):
    """vLLM's ShareGPT options: `output_len` (--sharegpt-output-len: a fixed reply length instead
    of the recorded one) and the `is_valid_sequence` filters (min_len, max_prompt_len,
    max_total_len, in tokens; null disables one). `max_turns=1` is vLLM's single-turn sample."""

    name: str = "dataset_sharegpt"
    family: str = "dataset"
    path: str = "sharegpt_sample.jsonl"  # relative: package data dir, then cwd
    tokenizer: str = "smollm2-135m"  # or the path of a local tokenizer.json
    max_conversations: int | None = None  # the first N usable ones
    max_turns: int | None = None  # per conversation
    output_len: int | None = None  # None: the recorded reply's length
    min_len: int | None = 4
    max_prompt_len: int | None = 1024
    max_total_len: int | None = 2048
    think_s: float = 0.0
    order: str = "round_robin"  # round_robin | sequential

    optional_positive = (
        "max_conversations",
        "max_turns",
        "output_len",
        "min_len",
        "max_prompt_len",
        "max_total_len",
    )
    choices = {"order": tuple(ORDERS.names())}

    def check(self) -> None:
        check_non_negative_number(self, "think_s")
        if not isinstance(self.path, str) or not self.path:
            raise fail("path", "a dataset file path", self.path)
        if not isinstance(self.tokenizer, str) or not self.tokenizer:
            raise fail("tokenizer", "smollm2-135m or the path of a tokenizer.json", self.tokenizer)


def load_records(path: Path) -> list[dict]:
    """Rows of a local JSON/JSONL file (workloads.readers: bounded, strict) or of a Parquet file
    through `datasets`, offline, in a throwaway cache."""
    if path.suffix == ".jsonl":
        return [
            json_object(line, f"{path}:{line_no}")
            for line_no, line in iter_lines(path, "dataset file")
            if line.strip()
        ]
    if path.suffix == ".json":
        rows = loads_json(read_text(path, "dataset file"), str(path))
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise BadInput(f"{path}: a .json dataset must hold one JSON array of objects")
        return rows
    builder = FORMATS.get(path.suffix)
    open_regular(path, "dataset file").close()  # a FIFO or a huge file: refused before datasets
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    with tempfile.TemporaryDirectory() as cache_dir:
        try:
            ds = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache_dir
            )
        except Exception as exc:  # a schema or parse error deep inside datasets/pyarrow
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise BadInput(f"{path}: cannot be read as {builder}: {first}") from exc
        return ds.to_list()


def fold_ids(ids: list[int], space: TokenSpace) -> tuple[int, ...]:
    """Fit ids into a smaller random-weight model's vocabulary (and off its warm-up id)."""
    bad = lambda i: i >= space.vocab_size or i == space.warmup_id
    return tuple(space.first_workload_id + i % space.num_workload_ids if bad(i) else i for i in ids)


def _reply_ids(
    answer: list[int], p: DatasetParams, seed: int, where: tuple, space: TokenSpace
) -> tuple[int, ...]:
    """The recorded reply, or exactly `output_len` tokens: cut, or padded from a seeded stream."""
    folded = fold_ids(answer, space)
    if p.output_len is None:
        return folded
    pad = max(0, p.output_len - len(folded))
    return folded[: p.output_len] + tuple(
        token_ids(space, (seed, "dataset-pad", *where), pad).tolist()
    )


def _session(
    conv: Conversation, index: int, p: DatasetParams, tok, space: TokenSpace, seed: int
) -> tuple[list[Request], str | None]:
    """The conversation's turns up to the first that fails a length filter, and that failure's
    reason when it is the first turn (the conversation is then skipped)."""
    from workloads.tokenizer import render_chatml

    messages = [{"role": "system", "content": conv.system}] if conv.system is not None else []
    ids: list[int] = []
    rendered = ""  # the text already turned into `ids`
    turns: list[Request] = []
    for k, (question, reply) in enumerate(conv.exchanges[: p.max_turns]):
        messages.append({"role": "user", "content": question})
        text = render_chatml(messages, add_generation_prompt=True)
        assert text.startswith(rendered)
        ids += tok.encode(text[len(rendered) :])  # starts right after a special token
        output_ids = _reply_ids(tok.encode(reply + END_OF_TURN), p, seed, (index, k), space)
        problem = length_problem(
            len(ids),
            len(output_ids),
            p.min_len,
            p.max_prompt_len,
            p.max_total_len,
            check_output=p.output_len is None,
        )
        if problem is not None:
            return turns, (problem if not turns else None)
        previous = turns[-1].request_id if turns else None
        turns.append(
            Request(
                request_id=f"c{index}-t{k}",
                prompt_ids=fold_ids(ids, space),
                output_ids=output_ids,
                session_id=f"c{index}",
                turn=k,
                after=previous,
                think_s=p.think_s if previous else 0.0,
                tags={"conversation_id": conv.record_id},
            )
        )
        ids += output_ids  # the history holds what was "generated"
        messages.append({"role": "assistant", "content": reply})
        rendered = text + reply + END_OF_TURN
    return turns, None


def generate_dataset(p: DatasetParams, seed: int, space: TokenSpace) -> Generated:
    from workloads.bounds import shared_prefix_lens
    from workloads.tokenizer import load

    path = resolve_data_path(p.path, "dataset file")
    records = load_records(path)
    conversations, skipped = parse_records(records, path)
    tok = load(p.tokenizer)
    sessions: list[list[Request]] = []
    limit = p.max_conversations if p.max_conversations is not None else len(conversations)
    for conv in progress(conversations, "tokenizing conversations", "conv"):
        if len(sessions) == limit:
            break
        turns, problem = _session(conv, len(sessions), p, tok, space, seed)
        if problem is not None:
            skipped[problem] += 1
        elif turns:
            sessions.append(turns)
    if not sessions:
        raise BadInput(
            f"{path}: no usable conversation among {len(records)} records ({_counts(skipped)})"
        )
    requests = interleave(sessions, p.order)
    # Conversations share the template's system turn, so the ground truth is measured, not known.
    requests = [
        dataclasses.replace(r, shared_prefix_len=n)
        for r, n in zip(requests, shared_prefix_lens(requests))
    ]
    notes = {
        "input_records": len(records),
        "input_skipped": sum(skipped.values()),
        "input_skipped_by_reason": dict(sorted(skipped.items())),
    }
    return Generated(requests, notes)


def _counts(skipped: Counter) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())) or "none skipped"
