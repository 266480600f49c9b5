"""`python -m harness.report --import inference-perf PATH`: inference-perf 0.7.0's real
per-request report (tests/data/inference_perf: its shared_prefix data, 2 groups x 4 prompts of a
32-token system prompt and 16-token question, 4 req/s for 2 s, against `harness.builtin_server`
model=smollm2-rand engine=apc served as prefixbench/smollm2) becomes a run."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.report.build import main as report_main

DATA = Path(__file__).resolve().parents[1] / "data" / "inference_perf"


def report(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report_main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_an_inference_perf_report_becomes_a_run(tmp_path):
    code, stdout, stderr = report("--import", "inference-perf", str(DATA), str(tmp_path))
    assert code == 0, stderr
    run = Path(stdout.strip())
    summary = json.loads((run / "summary.json").read_text())
    table = pd.read_parquet(run / "requests.parquet")
    source = json.loads((DATA / "per_request_lifecycle_metrics.json").read_text())
    assert summary["completed"] == len(source) == 8 and summary["failed"] == 0
    usage = [r["info"]["response_metrics"]["server_usage"] for r in source]
    # in start order, each request's cached tokens as the server reported them: the first of each
    # group misses, the other six hit the 32-token system prompt (two blocks)
    assert table["cached_tokens"].tolist() == [
        u["prompt_tokens_details"]["cached_tokens"] for u in usage
    ]
    assert table["cached_tokens"].tolist() == [0, 0] + [32] * 6
    assert table["request_id"].str.startswith("cmpl-").all()
    first = source[0]
    times = first["info"]["response_metrics"]["output_token_times"]
    assert table["ttft_ms"].iloc[0] == pytest.approx((times[0] - first["start_time"]) * 1e3)
    assert summary["mean_itl_ms"] is not None and summary["mean_itl_ms"] > 0
    assert (
        json.loads((run / "manifest.json").read_text())["client"]["model"] == "prefixbench/smollm2"
    )


@pytest.mark.parametrize(
    "body, needle",
    [
        ("[{", "not JSON"),
        ('{"a": 1}', "expected a list"),
        ("[{}]", "not an inference-perf request"),
    ],
)
def test_bad_reports_are_one_line_and_no_run(tmp_path, body, needle):
    (tmp_path / "per_request_lifecycle_metrics.json").write_text(body)
    out = tmp_path / "out"
    code, _, stderr = report("--import", "inference-perf", str(tmp_path), "--out", str(out))
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()
