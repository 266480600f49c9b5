"""A run's workload written as a Mooncake and a Qwen-Bailian trace and read back: the same prefix
structure, so the same engine gives the same cached tokens per request (docs/interop.md §3, §5);
the Bailian writer keeps sessions and turns."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.export_support import ZIPF_SYSTEM_PROMPT, export
from tests.harness_util import SMALL, merged, run_harness

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]
WORKLOADS = {
    "system_prompt": ZIPF_SYSTEM_PROMPT,
    "rag": ["workload=rag", "workload.num_prompts=12"],
}
READERS = {"mooncake": "base_trace", "bailian": "base_bailian"}


def cached(run_dir) -> list[int]:
    table = pd.read_parquet(run_dir / "requests.parquet")
    return table.sort_values("request_index")["cached_tokens"].tolist()


@pytest.mark.parametrize("fmt", list(READERS))
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_an_exported_trace_replays_the_same_cached_tokens(tmp_path, workload, fmt):
    original = run_harness(merged(SMALL, WORKLOADS[workload], SIM), tmp_path / "orig")
    assert original.returncode == 0, original.stderr
    code, _, err = export("--format", fmt, str(original.run_dir), "--out", str(tmp_path / "t"))
    assert code == 0, err
    trace = tmp_path / "t" / f"orig.{fmt}.jsonl"
    reader = [f"workload={READERS[fmt]}", f"workload.path={trace}", "workload.block_size=16"]
    replay = run_harness(merged(SMALL, reader, SIM), tmp_path / "replay")
    assert replay.returncode == 0, replay.stderr
    assert sum(cached(original.run_dir)) > 0
    assert cached(replay.run_dir) == cached(original.run_dir)


def test_bailian_keeps_sessions_turns_and_release_times(tmp_path):
    multiturn = [
        "workload=multiturn",
        "workload.num_users=3",
        "workload.num_rounds=3",
        "workload.system_prompt_len=40",
        "workload.user_history_len=20",
        "workload.question_len=12",
        "workload.answer_len=20",
    ]
    original = run_harness(merged(SMALL, multiturn, SIM), tmp_path / "mt")
    assert original.returncode == 0, original.stderr
    code, _, err = export("--format", "bailian", str(original.run_dir), "--out", str(tmp_path))
    assert code == 0, err
    lines = [json.loads(x) for x in (tmp_path / "mt.bailian.jsonl").read_text().splitlines()]
    table = pd.read_parquet(original.run_dir / "requests.parquet").sort_values("arrival_s")
    assert [x["input_length"] for x in lines] == table["prompt_tokens"].tolist()
    assert [x["turn"] for x in lines] == (table["turn"] + 1).tolist()
    assert [x["timestamp"] for x in lines] == pytest.approx(table["arrival_s"].tolist(), abs=1e-6)
    by_chat = {x["chat_id"]: x for x in lines}
    for line in lines:  # a later turn's parent is the same user's previous turn
        if line["turn"] > 1:
            parent = by_chat[line["parent_chat_id"]]
            assert parent["turn"] == line["turn"] - 1
            assert line["hash_ids"][:2] == parent["hash_ids"][:2]
        else:
            assert line["parent_chat_id"] == -1

    replay = run_harness(
        merged(
            SMALL, ["workload=base_bailian", f"workload.path={tmp_path / 'mt.bailian.jsonl'}"], SIM
        ),
        tmp_path / "replay",
    )
    assert replay.returncode == 0, replay.stderr
    again = pd.read_parquet(replay.run_dir / "requests.parquet").sort_values("request_index")
    sessions = again.groupby("session_id")["turn"].apply(sorted).tolist()
    assert sessions == [[0, 1, 2]] * 3


def test_aiperf_replaying_the_exported_trace_got_the_in_process_cached_tokens(tmp_path):
    """tests/data/aiperf holds aiperf 0.13.0's output of replaying this workload's exported trace
    against the built-in server (apc): the trace is this run's export byte for byte, and the
    server's cached tokens per request (imported) equal the in-process run's."""
    from harness.export.import_aiperf import import_aiperf
    from tests.harness_util import ROOT

    data = ROOT / "tests" / "data" / "aiperf"
    original = run_harness(merged(SMALL, WORKLOADS["system_prompt"], SIM), tmp_path / "orig")
    assert original.returncode == 0, original.stderr
    code, _, err = export("--format", "mooncake", str(original.run_dir), "--out", str(tmp_path))
    assert code == 0, err
    assert (tmp_path / "orig.mooncake.jsonl").read_text() == (
        data / "trace.mooncake.jsonl"
    ).read_text()
    served = import_aiperf(data).table.sort_values("session_num")
    assert served["cached_tokens"].tolist() == cached(original.run_dir)
