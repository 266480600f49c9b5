"""The `prompts` family: the user's own prompts from JSONL, text or ids, with sessions, output
lengths and arrival times; every bad line is one error naming the file, the line and the field."""

from __future__ import annotations

import json

import pytest

from tests.workload_util import brute_shared
from workloads.base import FAMILIES, TokenSpace, generate, generate_with_notes
from workloads.errors import BadInput

SPACE = TokenSpace(vocab_size=32000, first_ordinary_id=1)
Params = FAMILIES.get("prompts").params_cls


def write(tmp_path, rows) -> str:
    path = tmp_path / "asks.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_sessions_outputs_arrivals_and_ground_truth(tmp_path):
    path = write(
        tmp_path,
        [
            {"prompt_ids": [5, 6, 7, 8], "session": "a", "output_len": 3},
            {"prompt_ids": [9, 10], "arrival_s": 0.5},
            "",
            {"prompt_ids": [5, 6, 7, 8, 11, 12], "session": "a"},
        ],
    )
    made = generate_with_notes(Params(path=path, output_len=5, think_s=0.25), 0, SPACE)
    first, lone, second = made.requests
    assert made.notes == {"input_records": 3, "input_skipped": 0}
    assert [r.request_id for r in made.requests] == ["asks-1", "asks-2", "asks-4"]
    assert (len(first.output_ids), len(lone.output_ids), len(second.output_ids)) == (3, 5, 5)
    assert (second.after, second.turn, second.think_s, second.session_id) == (
        "asks-1",
        1,
        0.25,
        "a",
    )
    assert lone.arrival_s == 0.5 and lone.after is None
    assert [r.shared_prefix_len for r in made.requests] == brute_shared(made.requests)
    assert Params(path=path).name == "asks"  # no name: the file's stem
    assert generate(Params(path=path), 0, SPACE) == generate(Params(path=path), 0, SPACE)


def test_text_prompts_use_the_tokenizer(tmp_path):
    path = write(tmp_path, [{"prompt": "What is a prefix cache?"}])
    (raw,) = generate(Params(path=path), 0, SPACE)
    (chat,) = generate(Params(path=path, chat_template=True), 0, SPACE)
    assert 0 < len(raw.prompt_ids) < len(chat.prompt_ids)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("{oops", "not valid JSON"),
        ('{"prompt": "a", "prompt_ids": [1]}', "exactly one of 'prompt' (text) and 'prompt_ids'"),
        ('{"text": "a"}', "unknown field 'text'; valid: prompt, prompt_ids"),
        ('{"prompt": ""}', "prompt must be a non-empty string"),
        ('{"prompt_ids": [1, -2]}', "prompt_ids must be a non-empty list of non-negative integers"),
        ('{"prompt_ids": [1], "output_len": 0}', "output_len must be a positive integer"),
        ('{"prompt_ids": [1], "arrival_s": -1}', "arrival_s must be a non-negative number"),
        ('{"prompt_ids": [1], "session": [1]}', "session must be a string or an integer"),
        ('{"prompt_ids": [1], "arrival_s": 0.1}', "earlier than the line before"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_line_and_field(tmp_path, line, problem):
    path = write(tmp_path, ['{"prompt_ids": [1, 2], "arrival_s": 1.0}', line])
    with pytest.raises(ValueError) as info:
        generate(Params(path=path), 0, SPACE)
    assert str(info.value).startswith(f"{path}:2: ") and problem in str(info.value)


def test_an_empty_file_and_a_missing_one(tmp_path):
    with pytest.raises(ValueError, match="no prompt lines"):
        generate(Params(path=write(tmp_path, ["", ""])), 0, SPACE)
    with pytest.raises(BadInput, match="prompt file 'nope.jsonl' not found"):
        generate(Params(path="nope.jsonl"), 0, SPACE)
