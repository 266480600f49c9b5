"""`python -m harness.report --import sglang-bench PATH`: SGLang 0.5.23's `bench_serving
--output-details --cache-report` line (tests/data/sglang_bench/bench_serving.jsonl: its
generated-shared-prefix dataset, 2 groups of 4 prompts with a 64-token system prompt, one at a
time, backend sglang-oai against `harness.builtin_server` model=smollm2-rand engine=apc) becomes
a run; what the client does not keep (start times, cached tokens the server sent no `sglext`
for) stays unknown, never zero."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.export_support import report

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang_bench" / "bench_serving.jsonl"


def test_an_sglang_bench_line_becomes_a_run(tmp_path):
    code, stdout, stderr = report("--import", "sglang-bench", str(DATA), str(tmp_path))
    assert code == 0, stderr
    run = Path(stdout.strip())
    summary = json.loads((run / "summary.json").read_text())
    table = pd.read_parquet(run / "requests.parquet")
    source = json.loads(DATA.read_text().splitlines()[-1])
    assert summary["completed"] == source["completed"] == 8 and summary["failed"] == 0
    assert table["prompt_tokens"].tolist() == source["input_lens"]
    assert table["output_tokens"].tolist() == source["output_lens"]
    assert summary["mean_ttft_ms"] == pytest.approx(source["mean_ttft_ms"])
    assert summary["mean_itl_ms"] == pytest.approx(source["mean_itl_ms"])
    # streamed: the last token arrives TTFT plus the gaps after the start, as SGLang's own E2E
    assert summary["mean_e2e_latency_ms"] == pytest.approx(source["mean_e2e_latency_ms"], rel=0.02)
    # the built-in server sends no sglext, so the client's zeros are not a measurement
    assert source["cached_tokens"] == [0] * 8 and source["cached_tokens_details"] == [None] * 8
    assert table["cached_tokens"].isna().all() and summary["hit_rate"] is None
    assert table["arrival_s"].isna().all() and summary["max_overlapping_requests"] is None


def test_the_newest_run_of_an_appended_file_is_imported(tmp_path):
    line = json.loads(DATA.read_text())
    older = {**line, "input_lens": [1] * 8}
    (tmp_path / "out.jsonl").write_text(json.dumps(older) + "\n" + json.dumps(line) + "\n")
    code, stdout, stderr = report(
        "--import", "sglang-bench", str(tmp_path / "out.jsonl"), str(tmp_path)
    )
    assert code == 0, stderr
    table = pd.read_parquet(Path(stdout.strip()) / "requests.parquet")
    assert table["prompt_tokens"].tolist() == line["input_lens"]
    manifest = json.loads((Path(stdout.strip()) / "manifest.json").read_text())
    assert manifest["client"]["runs_in_file"] == 2


@pytest.mark.parametrize(
    "body, needle",
    [
        ('{"backend": "sglang-oai", "duration"', "not JSON"),
        ('{"backend": "sglang-oai", "completed": 8}', "--output-details"),
        ("[1, 2]", "not an SGLang bench_serving result"),
    ],
)
def test_bad_files_are_one_line_and_no_run(tmp_path, body, needle):
    (tmp_path / "b.jsonl").write_text(body + "\n")
    out = tmp_path / "out"
    code, _, stderr = report(
        "--import", "sglang-bench", str(tmp_path / "b.jsonl"), "--out", str(out)
    )
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()


def test_a_server_log_cannot_join_a_client_that_names_no_request(tmp_path):
    log = Path(__file__).resolve().parents[1] / "data" / "vllm_bench" / "server_requests.jsonl"
    out = tmp_path / "out"
    args = ["--import", "sglang-bench", str(DATA), "--out", str(out), "--server-log", str(log)]
    code, _, stderr = report(*args)
    assert code == 2 and "sends no request id" in stderr and not out.exists()
