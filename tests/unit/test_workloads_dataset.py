"""The ShareGPT dataset family, offline, on the shipped sample and on small files written here."""

from __future__ import annotations

import json

import pytest

from tests.workload_util import DUMP, GOOD, brute_shared
from workloads import tokenizer
from workloads.base import FAMILIES, TokenSpace, generate

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
    conv = [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "Name a prime number between 20 and 30."},
        {"role": "assistant", "content": "23 is a prime number between 20 and 30."},
        {"role": "user", "content": "And another one?"},
    ]
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
            "conversations": [
                {"from": "human", "value": "Hi"},
                {"from": "gpt", "value": "Hello! How can I help you today?"},
            ],
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
    ],
)
def test_records_that_are_not_sharegpt_fail_naming_file_and_record(tmp_path, record, problem):
    path = _write_jsonl(tmp_path / "bad.jsonl", [GOOD, record])
    with pytest.raises(ValueError) as info:
        generate(Params(path=path), 0, SMOL)
    message = str(info.value)
    assert message.startswith(f"{path}: record 1") and problem in message


def test_a_real_looking_dump_skips_bad_records_and_counts_them(tmp_path):
    from workloads.base import generate_with_notes

    made = generate_with_notes(Params(path=_write_jsonl(tmp_path / "dump.jsonl", DUMP)), 0, SMOL)
    kept = {r.tags["conversation_id"] for r in made.requests}
    assert kept == {"ok", "two-turns"} and len(made.requests) == 3
    assert made.notes == {
        "input_records": 8,
        "input_skipped": 6,
        "input_skipped_by_reason": {
            "empty": 1,
            "lone_human_turn": 1,
            "starts_with_assistant": 1,
            "too_long": 1,
            "too_short": 1,
            "unknown_role": 1,
        },
    }


def test_length_filters_end_a_conversation_at_the_first_long_turn(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [DUMP[-1]])
    both = generate(Params(path=path), 0, SMOL)
    first_len = len(both[0].prompt_ids)
    only_first = generate(Params(path=path, max_prompt_len=first_len), 0, SMOL)
    assert [r.turn for r in both] == [0, 1] and [r.turn for r in only_first] == [0]
    with pytest.raises(ValueError, match="no usable conversation among 1 records \\(1 too_long\\)"):
        generate(Params(path=path, max_prompt_len=first_len - 1), 0, SMOL)
    assert (
        len(
            generate(
                Params(path=path, min_len=None, max_prompt_len=None, max_total_len=None), 0, SMOL
            )
        )
        == 2
    )


def test_fixed_output_len_cuts_or_pads_the_reply_and_the_history_follows(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [DUMP[-1]])
    recorded = generate(Params(path=path), 0, SMOL)
    for n in (3, 40):
        t0, t1 = generate(Params(path=path, output_len=n), 0, SMOL)
        assert len(t0.output_ids) == len(t1.output_ids) == n
        assert t0.output_ids[:3] == recorded[0].output_ids[:3]
        assert t1.prompt_ids[: len(t0.prompt_ids) + n] == t0.prompt_ids + t0.output_ids
    assert generate(Params(path=path, output_len=40), 0, SMOL) == generate(
        Params(path=path, output_len=40), 0, SMOL
    )


def test_a_local_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    texts = [m["value"] for r in DUMP for m in r["conversations"]] + ["<|im_start|> user system"]
    tok.train_from_iterator(
        texts * 5, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    path = _write_jsonl(tmp_path / "d.jsonl", [GOOD])
    reqs = generate(Params(path=path, tokenizer=str(tmp_path)), 0, SMOL)  # the folder works too
    smol = generate(Params(path=path), 0, SMOL)
    assert len(reqs) == 1 and reqs[0].prompt_ids != smol[0].prompt_ids
    assert max(reqs[0].prompt_ids) < 300
    with pytest.raises(ValueError, match="or the path of a local tokenizer.json"):
        generate(Params(path=path, tokenizer="no-such-tokenizer"), 0, SMOL)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="nothere.jsonl"):  # workloads.errors.BadInput
        generate(Params(path="nothere.jsonl"), 0, SMOL)
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(
        ValueError, match="unknown dataset file type '.txt'; valid: .json, .jsonl, .parquet"
    ):
        generate(Params(path=str(tmp_path / "c.txt")), 0, SMOL)
