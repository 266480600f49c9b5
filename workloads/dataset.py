"""`dataset`: ShareGPT-layout conversations from local JSON, JSONL or Parquet, offline.

Each conversation becomes a multi-turn session: turn k's prompt is SmolLM2's chat template over
the messages so far, its scripted reply the recorded answer. Ids are built turn by turn, so
turn k+1 starts with exactly turn k's prompt + reply (the template splits at special tokens).
`datasets` is imported lazily, with HF_DATASETS_OFFLINE=1: nothing touches the network.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from workloads.base import (
    WorkloadParams,
    check_non_negative_number,
    fail,
    register_family,
    resolve_data_path,
)
from workloads.errors import BadInput
from workloads.registry import Registry
from workloads.request import Request
from workloads.sessions import ORDERS, interleave
from workloads.tokens import TokenSpace

FORMATS: Registry = Registry("dataset file type")  # suffix -> datasets builder
for _suffix, _builder in ((".json", "json"), (".jsonl", "json"), (".parquet", "parquet")):
    FORMATS.add(_suffix, _builder)
ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "system": "system",
}
END_OF_TURN = "<|im_end|>"


@dataclass
class DatasetParams(WorkloadParams):
    name: str = "dataset_sharegpt"
    family: str = "dataset"
    path: str = "sharegpt_sample.jsonl"  # relative: package data dir, then cwd
    tokenizer: str = "smollm2-135m"
    max_conversations: int | None = None
    max_turns: int | None = None  # per conversation
    think_s: float = 0.0
    order: str = "round_robin"  # round_robin | sequential

    optional_positive = ("max_conversations", "max_turns")
    choices = {"order": tuple(ORDERS.names())}

    def check(self) -> None:
        check_non_negative_number(self, "think_s")
        if not isinstance(self.path, str) or not self.path:
            raise fail("path", "a dataset file path", self.path)


class Conversation(NamedTuple):
    record_id: str
    system: str | None
    exchanges: list[tuple[str, str]]  # (user message, assistant reply)


def load_records(path: Path) -> list[dict]:
    """Rows of a local JSON/JSONL/Parquet file through `datasets`, offline, in a throwaway cache."""
    builder = FORMATS.get(path.suffix)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    with tempfile.TemporaryDirectory() as cache_dir:
        try:
            ds = datasets.load_dataset(
                builder, data_files=str(path), split="train", cache_dir=cache_dir
            )
        except Exception as exc:  # a schema or parse error deep inside datasets/pyarrow
            raise BadInput(f"{path}: cannot be read as {builder}: {exc}") from exc
        return ds.to_list()


def parse_conversation(record: object, where: str) -> Conversation:
    """ShareGPT layout: {"id"?, "conversations": [{"from", "value"}, ...]}; an optional leading
    system message, then user/assistant pairs; a trailing unanswered user message is dropped."""
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise BadInput(
            f"{where}: missing field 'conversations' (a list of {{from, value}} messages)"
        )
    messages = []
    for j, msg in enumerate(record["conversations"]):
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("from"), str)
            or not isinstance(msg.get("value"), str)
        ):
            raise BadInput(f"{where}: message {j} needs string fields 'from' and 'value'")
        if msg["from"] not in ROLES:
            raise BadInput(
                f"{where}: message {j} is from {msg['from']!r}; valid: {', '.join(sorted(ROLES))}"
            )
        messages.append((ROLES[msg["from"]], msg["value"]))
    system = messages.pop(0)[1] if messages and messages[0][0] == "system" else None
    exchanges = []
    for j in range(0, len(messages) - 1, 2):
        (role_q, question), (role_a, reply) = messages[j], messages[j + 1]
        if (role_q, role_a) != ("user", "assistant"):
            raise BadInput(
                f"{where}: messages {j}, {j + 1} are {role_q}/{role_a}, expected user/assistant"
            )
        exchanges.append((question, reply.strip()))  # a reply's leading space would re-tokenise
    if not exchanges:
        raise BadInput(f"{where}: no user/assistant exchange")
    return Conversation(str(record.get("id") or ""), system, exchanges)


def _fold(ids: list[int], space: TokenSpace) -> tuple[int, ...]:
    """Fit ids into a smaller random-weight model's vocabulary (and off its warm-up id)."""
    bad = lambda i: i >= space.vocab_size or i == space.warmup_id
    return tuple(space.first_workload_id + i % space.num_workload_ids if bad(i) else i for i in ids)


def _session(
    conv: Conversation, index: int, p: DatasetParams, tok, space: TokenSpace
) -> list[Request]:
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
        answer = tok.encode(reply + END_OF_TURN)
        previous = turns[-1].request_id if turns else None
        turns.append(
            Request(
                request_id=f"c{index}-t{k}",
                prompt_ids=_fold(ids, space),
                output_ids=_fold(answer, space),
                session_id=f"c{index}",
                turn=k,
                after=previous,
                think_s=p.think_s if previous else 0.0,
                tags={"conversation_id": conv.record_id},
            )
        )
        ids += answer
        messages.append({"role": "assistant", "content": reply})
        rendered = text + reply + END_OF_TURN
    return turns


@register_family("dataset", DatasetParams)
def generate_dataset(p: DatasetParams, seed: int, space: TokenSpace) -> list[Request]:
    from workloads.bounds import shared_prefix_lens
    from workloads.tokenizer import load

    path = resolve_data_path(p.path, "dataset file")
    records = load_records(path)[: p.max_conversations]
    conversations = [
        parse_conversation(
            rec,
            f"{path}: record {i} (id {rec.get('id')!r})"
            if isinstance(rec, dict)
            else f"{path}: record {i}",
        )
        for i, rec in enumerate(records)
    ]
    tok = load(p.tokenizer)
    requests = interleave(
        [_session(c, i, p, tok, space) for i, c in enumerate(conversations)], p.order
    )
    # Conversations share the template's system turn, so the ground truth is measured, not known.
    return [
        dataclasses.replace(r, shared_prefix_len=n)
        for r, n in zip(requests, shared_prefix_lens(requests))
    ]
