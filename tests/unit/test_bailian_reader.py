"""The Qwen-Bailian reader (workloads/bailian.py): the shipped sample's sessions, turns, arrivals
and shared prefixes; parent links that leave the file or loop; every bad line one BadInput naming
the file and line."""

from __future__ import annotations

import json

import pytest

from workloads.bailian import BailianParams, generate_bailian, session_roots
from workloads.base import TokenSpace
from workloads.errors import BadInput

SPACE = TokenSpace(vocab_size=1024, first_ordinary_id=1)


def write(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def row(chat_id: int, parent: int = -1, turn: int = 1, ids=(0, 1), length: int = 20, **kw):
    return {
        "chat_id": chat_id,
        "parent_chat_id": parent,
        "timestamp": 0.5 * chat_id,
        "input_length": length,
        "output_length": 3,
        "type": "text",
        "turn": turn,
        "hash_ids": list(ids),
        **kw,
    }


def test_the_sample_replays_as_sessions_of_turns():
    reqs = generate_bailian(BailianParams(), 0, SPACE)
    assert len(reqs) == 12
    turns: dict[str, list[int]] = {}
    for r in reqs:
        turns.setdefault(str(r.session_id), []).append(r.turn)
    assert sorted(turns.values()) == [[0, 1, 2]] * 4
    assert [r.arrival_s for r in reqs] == sorted(r.arrival_s for r in reqs)
    first, later = reqs[0], reqs[2]  # chat 2 is chat 0's next turn
    assert later.session_id == first.session_id and later.turn == 1
    assert list(later.prompt_ids[: 7 * 16]) == list(first.prompt_ids[: 7 * 16])
    assert later.shared_prefix_len == 7 * 16  # its parent's seven full blocks
    assert reqs[1].shared_prefix_len == 64  # another user: the 64-token system prompt
    assert first.tags["chat_id"] == 0 and first.tags["type"] == "text"


def test_sessions_follow_parents_and_survive_missing_ones_and_loops(tmp_path):
    rows = [row(5), row(9, parent=5, turn=2), row(11, parent=9, turn=3), row(20, parent=99)]
    rows += [row(30, parent=31), row(31, parent=30)]  # a loop
    path = write(tmp_path, rows)
    reqs = generate_bailian(BailianParams(path=path), 0, SPACE)
    assert [r.session_id for r in reqs[:4]] == ["5", "5", "5", "20"]
    assert [r.turn for r in reqs[:3]] == [0, 1, 2]
    assert reqs[4].session_id == reqs[5].session_id
    assert session_roots([]) == {}


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"chat_id": "7"}, "chat_id must be an integer >= 0"),
        ({"parent_chat_id": -2}, "parent_chat_id must be an integer >= -1"),
        ({"turn": 1.5}, "turn must be an integer >= 0"),
        ({"type": "video"}, "type must be one of file, image, search, text"),
        ({"timestamp": -1}, "timestamp must be a non-negative number of s"),
        ({"input_length": 40}, "input_length 40 does not fit 2 hash_ids of 16 tokens"),
        ({"hash_ids": []}, "hash_ids must be a non-empty list"),
    ],
)
def test_a_bad_line_is_one_line_naming_it(tmp_path, bad, needle):
    path = write(tmp_path, [row(0), {**row(1), **bad}])
    with pytest.raises(BadInput, match=needle) as info:
        generate_bailian(BailianParams(path=path), 0, SPACE)
    assert str(info.value).startswith(f"{path}:2: ")


def test_a_repeated_chat_id_and_a_truncated_line(tmp_path):
    path = write(tmp_path, [row(0), row(0)])
    with pytest.raises(BadInput, match=r":2: chat_id 0 appears twice"):
        generate_bailian(BailianParams(path=path), 0, SPACE)
    text = json.dumps(row(0)) + "\n" + json.dumps(row(1))[:30] + "\n"
    (tmp_path / "cut.jsonl").write_text(text)
    with pytest.raises(BadInput, match=r"cut.jsonl:2: "):
        generate_bailian(BailianParams(path=str(tmp_path / "cut.jsonl")), 0, SPACE)
