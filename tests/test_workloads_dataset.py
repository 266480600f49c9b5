"""The ShareGPT dataset family, offline, on the shipped sample and on small files written here."""

from __future__ import annotations

import json

import pytest

from tests.workload_util import brute_shared
from workloads.base import FAMILIES, TokenSpace, generate

tokenizer = pytest.importorskip(
    "workloads.tokenizer", reason="workloads/tokenizer.py is not written yet"
)
SMOL = TokenSpace(vocab_size=49152, first_ordinary_id=17)
Params = FAMILIES.get("dataset").params_cls


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_sample_sessions_are_chat_templated_turns():
    reqs = generate(Params(), 0, SMOL)
    sessions = {r.session_id for r in reqs}
    assert len(sessions) == 6 and len(reqs) == 12  # 6 conversations, 12 answered user turns
    by_id = {r.request_id: r for r in reqs}
    for r in reqs:
        if r.after is not None:
            prev = by_id[r.after]
            head = prev.prompt_ids + prev.output_ids
            assert r.prompt_ids[: len(head)] == head and r.think_s == 0.0
    assert [r.shared_prefix_len for r in reqs] == brute_shared(reqs)
    # built turn by turn, the ids equal a one-pass encoding of the whole chat template
    conv = [{"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "Name a prime number between 20 and 30."},
            {"role": "assistant", "content": "23 is a prime number between 20 and 30."},
            {"role": "user", "content": "And another one?"}]  # fmt: skip
    assert by_id["c1-t1"].prompt_ids == tuple(tokenizer.apply_chat_template(conv))
    assert (
        tokenizer.load()
        .decode(by_id["c1-t0"].output_ids, skip_special_tokens=False)
        .endswith("<|im_end|>")
    )


def test_limits_order_and_determinism():
    reqs = generate(
        Params(max_conversations=2, max_turns=1, order="sequential", think_s=1.0), 0, SMOL
    )
    assert [r.request_id for r in reqs] == ["c0-t0", "c1-t0"]
    assert generate(Params(), 0, SMOL) == generate(Params(), 0, SMOL)


def test_folds_ids_into_a_smaller_vocabulary():
    small = TokenSpace(vocab_size=1000, first_ordinary_id=1)
    reqs = generate(Params(max_conversations=3), 0, small)
    ids = [t for r in reqs for t in r.prompt_ids + r.output_ids]
    assert max(ids) < 1000 and small.warmup_id not in ids
    assert [r.shared_prefix_len for r in reqs] == brute_shared(reqs)


def test_json_array_and_parquet_files(tmp_path):
    records = [
        {
            "id": "a",
            "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}],
        }
    ]
    (tmp_path / "c.json").write_text(json.dumps(records))
    import pandas as pd

    pd.DataFrame(records).to_parquet(tmp_path / "c.parquet")
    a = generate(Params(path=str(tmp_path / "c.json")), 0, SMOL)
    b = generate(Params(path=str(tmp_path / "c.parquet")), 0, SMOL)
    assert len(a) == 1 and a == b


@pytest.mark.parametrize(
    "record,problem",
    [
        ({"id": "x", "turns": []}, "missing field 'conversations'"),
        (
            {"id": "x", "conversations": [{"from": "human"}]},
            "message 0 needs string fields 'from' and 'value'",
        ),
        (
            {
                "id": "x",
                "conversations": [{"from": "gpt", "value": "a"}, {"from": "human", "value": "b"}],
            },
            "expected user/assistant",
        ),
        (
            {"id": "x", "conversations": [{"from": "human", "value": "only a question"}]},
            "no user/assistant exchange",
        ),
    ],
)
def test_bad_records_fail_naming_file_and_record(tmp_path, record, problem):
    good = {
        "id": "ok",
        "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}],
    }
    path = _write_jsonl(tmp_path / "bad.jsonl", [good, record])
    with pytest.raises(ValueError) as info:
        generate(Params(path=path), 0, SMOL)
    message = str(info.value)
    assert message.startswith(f"{path}: record 1") and problem in message


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="nothere.jsonl"):  # workloads.errors.BadInput
        generate(Params(path="nothere.jsonl"), 0, SMOL)
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(
        ValueError, match="unknown dataset file type '.txt'; valid: .json, .jsonl, .parquet"
    ):
        generate(Params(path=str(tmp_path / "c.txt")), 0, SMOL)
