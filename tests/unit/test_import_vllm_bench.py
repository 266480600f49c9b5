"""`python -m harness.report --import vllm-bench PATH`: vLLM 0.33's `bench serve --save-result
--save-detailed` file (tests/data/vllm_bench/result.json: 8 random prompts of 96 tokens sharing a
64-token prefix, one at a time, against `harness.builtin_server` model=smollm2-rand engine=apc
with request_log=server_requests.jsonl beside it) becomes a run; joined to the server's log by
the request ids the client sent, it carries the server's cached tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.export_support import report

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_bench"
RESULT = DATA / "result.json"
SERVER_LOG = DATA / "server_requests.jsonl"


def test_a_vllm_bench_result_becomes_a_run(tmp_path):
    code, stdout, stderr = report("--import", "vllm-bench", str(RESULT), str(tmp_path))
    assert code == 0, stderr
    run = Path(stdout.strip())
    assert run == tmp_path / "imported" / "vllm-bench-result"
    summary = json.loads((run / "summary.json").read_text())
    table = pd.read_parquet(run / "requests.parquet")
    source = json.loads(RESULT.read_text())
    assert summary["completed"] == source["completed"] == 8 and summary["failed"] == 0
    assert table["prompt_tokens"].tolist() == source["input_lens"]
    assert table["ttft_ms"].tolist() == pytest.approx([t * 1e3 for t in source["ttfts"]])
    assert table["e2el_ms"].tolist() == pytest.approx([t * 1e3 for t in source["latencies"]])
    starts = [s - source["start_times"][0] for s in source["start_times"]]
    assert table["arrival_s"].tolist() == pytest.approx(starts)
    assert summary["mean_ttft_ms"] == pytest.approx(source["mean_ttft_ms"])
    # the client reads no cached tokens: no hit rate without the server's log
    assert table["cached_tokens"].isna().all() and summary["hit_rate"] is None


def test_the_server_log_joins_by_the_ids_the_client_sent(tmp_path):
    out = tmp_path / "run"
    args = ["--import", "vllm-bench", str(RESULT), "--out", str(out)]
    code, _, stderr = report(*args, "--server-log", str(SERVER_LOG))
    assert code == 0, stderr
    table = pd.read_parquet(out / "requests.parquet")
    logged = [json.loads(x) for x in SERVER_LOG.read_text().splitlines()]
    # the client sent x-request-id <prefix><index>; the server logged it beside its own id
    by_index = {r["client_request_id"].rsplit("-", 1)[1]: r for r in logged}
    assert table["server_request_id"].tolist() == [
        by_index[i]["request_id"] for i in table["request_id"]
    ]
    # one at a time: the first prompt misses, the others hit the 64-token prefix (4 blocks)
    assert table["cached_tokens"].tolist() == [0] + [64] * 7
    assert table["server_prompt_tokens"].tolist() == table["prompt_tokens"].tolist()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompt_tokens_cached"] == 448
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["client"]["server"]["rows_joined"] == 8


@pytest.mark.parametrize(
    "body, needle",
    [
        ('{"duration": 1', "not JSON"),
        ('{"duration": 1.0, "completed": 2}', "not a vLLM bench serve result with its"),
        (
            '{"input_lens": [1], "output_lens": [], "ttfts": [], "itls": [], "latencies": [],'
            ' "start_times": [], "errors": []}',
            "differ in length",
        ),
    ],
)
def test_bad_results_are_one_line_and_no_run(tmp_path, body, needle):
    (tmp_path / "r.json").write_text(body)
    out = tmp_path / "out"
    code, _, stderr = report("--import", "vllm-bench", str(tmp_path / "r.json"), "--out", str(out))
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()


def test_a_log_without_the_runs_requests_is_one_line_and_no_run(tmp_path):
    other = tmp_path / "other.jsonl"  # the log of a 4-request run: ids <prefix>0..3
    other.write_text("".join(SERVER_LOG.read_text().splitlines(keepends=True)[:4]))
    out = tmp_path / "out"
    args = ["--import", "vllm-bench", str(RESULT), "--out", str(out), "--server-log", str(other)]
    code, _, stderr = report(*args)
    assert code == 2 and "none of the 8 vllm-bench requests" in stderr
    assert not out.exists()


def test_a_request_id_prefix_that_ends_in_a_digit_still_joins(tmp_path):
    """`--request-id-prefix run1` sends run10 ... run17: position 0 is not position 10."""
    prefix = json.loads(SERVER_LOG.read_text().splitlines()[0])["client_request_id"][:-1]
    log = tmp_path / "log.jsonl"
    log.write_text(SERVER_LOG.read_text().replace(prefix, "run1"))
    out = tmp_path / "out"
    args = ["--import", "vllm-bench", str(RESULT), "--out", str(out), "--server-log", str(log)]
    assert report(*args)[0] == 0
    assert pd.read_parquet(out / "requests.parquet")["cached_tokens"].tolist() == [0] + [64] * 7
