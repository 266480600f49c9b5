"""ShareGPT records -> conversations, skipping what a real dump holds that is not a chat.

vLLM's benchmark (`vllm/benchmarks/datasets.py`, `ShareGPTDataset`) keeps records with at least
two messages and drops prompts or replies that are too short or too long; a real dump also holds
conversations that start with the assistant, a lone question, no message at all, or roles such as
"bing". Those are skipped and counted by reason. A file that is not ShareGPT-shaped at all (no
`conversations` list, messages without string `from`/`value`) is an error naming the record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from workloads.errors import BadInput

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "system": "system",
}

# Why a record is skipped; the summary counts each (the length reasons come from dataset.py).
SKIP_REASONS = (
    "empty",
    "unknown_role",
    "starts_with_assistant",
    "lone_human_turn",
    "too_short",
    "too_long",
)


class Conversation(NamedTuple):
    record_id: str
    system: str | None
    exchanges: list[tuple[str, str]]  # (user message, assistant reply)


class Skipped(NamedTuple):
    reason: str  # one of SKIP_REASONS


def parse_conversation(record: object, where: str) -> Conversation | Skipped:
    """ShareGPT layout: {"id"?, "conversations": [{"from", "value"}, ...]}: an optional leading
    system message, then user/assistant pairs. Exchanges stop at the first message that breaks
    the alternation; a trailing unanswered question is dropped."""
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
            return Skipped("unknown_role")
        messages.append((ROLES[msg["from"]], msg["value"]))
    system = messages.pop(0)[1] if messages and messages[0][0] == "system" else None
    if not messages:
        return Skipped("empty")
    if messages[0][0] != "user":
        return Skipped("starts_with_assistant")
    exchanges = []
    for j in range(0, len(messages) - 1, 2):
        (role_q, question), (role_a, reply) = messages[j], messages[j + 1]
        if (role_q, role_a) != ("user", "assistant"):
            break
        exchanges.append((question, reply.strip()))  # a reply's leading space would re-tokenise
    if not exchanges:
        return Skipped("lone_human_turn")
    return Conversation(str(record.get("id") or ""), system, exchanges)


def parse_records(records: Iterable[object], path: object) -> tuple[list[Conversation], Counter]:
    """Every usable conversation, in file order, and how many records were skipped, by reason."""
    conversations: list[Conversation] = []
    skipped: Counter = Counter()
    for i, rec in enumerate(records):
        rid = f" (id {rec.get('id')!r})" if isinstance(rec, dict) else ""
        parsed = parse_conversation(rec, f"{path}: record {i}{rid}")
        if isinstance(parsed, Skipped):
            skipped[parsed.reason] += 1
        else:
            conversations.append(parsed)
    return conversations, skipped


def length_problem(
    prompt_len: int,
    output_len: int,
    min_len: int | None,
    max_prompt_len: int | None,
    max_total_len: int | None,
    check_output: bool,
) -> str | None:
    """vLLM's `is_valid_sequence`: "too_short" or "too_long", or None when the turn is kept."""
    if min_len is not None and (prompt_len < min_len or (check_output and output_len < min_len)):
        return "too_short"
    if max_prompt_len is not None and prompt_len > max_prompt_len:
        return "too_long"
    if max_total_len is not None and prompt_len + output_len > max_total_len:
        return "too_long"
    return None
