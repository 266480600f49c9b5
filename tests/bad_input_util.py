"""Data files that are wrong in one way each, shared by the in-process bad-input table
(tests/run/test_bad_input.py) and its command-line cases (tests/live/test_cli_bad_input.py)."""

from __future__ import annotations

import json
from pathlib import Path

GOOD_LINE = '{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [0, 1]}'


def line(**fields) -> str:
    obj = {"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [0, 1], **fields}
    return json.dumps(obj)


DATA_FILES = {  # written into each test's tmp_path; {d} in the cases is that directory
    "bad_json.jsonl": f'{GOOD_LINE}\n{{"timestamp": 1, oops\n',
    "no_field.jsonl": '{"timestamp": 0, "input_length": 20, "hash_ids": [0, 1]}\n',
    "nan_time.jsonl": GOOD_LINE
    + '\n{"timestamp": NaN, "input_length": 20, "output_length": 2, "hash_ids": [0, 1]}\n',
    "inf_time.jsonl": '{"timestamp": Infinity, "input_length": 20, "output_length": 2, "hash_ids": [0]}\n',
    "neg_time.jsonl": line(timestamp=-5) + "\n",
    "late.jsonl": GOOD_LINE + "\n" + line(timestamp=1e8) + "\n",
    "huge_hash.jsonl": line(hash_ids=[0, 2**64]) + "\n",
    "no_hash.jsonl": line(hash_ids=[]) + "\n",
    "too_long.jsonl": line(input_length=100) + "\n",
    "zero_out.jsonl": line(output_length=0) + "\n",
    "huge_len.jsonl": line(input_length=10**12, hash_ids=[0]) + "\n",
    "str_len.jsonl": line(input_length="20") + "\n",
    "not_object.jsonl": "[1, 2, 3]\n",
    "empty.jsonl": "",
    "blank.jsonl": "\n\n",
    "no_conversations.jsonl": '{"id": "r1", "turns": []}\n',
    "no_value.jsonl": '{"id": "r2", "conversations": [{"from": "human"}]}\n',
}


TRACE = [
    "workload=mooncake_conversation",
    "workload.name=user_trace",
    "workload.block_size=16",
    "workload.max_requests=null",
]


def prepare(tmp_path: Path) -> None:
    for name, text in DATA_FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "finished").mkdir()
    (tmp_path / "finished" / "summary.json").write_text('{"status": "ok"}\n')
