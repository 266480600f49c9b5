"""`python -m harness.report --import guidellm PATH`: guidellm 0.8.1's real report
(tests/data/guidellm/benchmarks.json: 8 synchronous requests of 48 synthetic prompt tokens with a
32-token shared prefix, against `harness.builtin_server` model=smollm2-rand engine=apc, served as
prefixbench/smollm2) becomes a run; bad input is one line, exit 2, no run folder."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.report.build import main as report_main

DATA = Path(__file__).resolve().parents[1] / "data" / "guidellm"


def report(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report_main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_a_guidellm_report_becomes_a_run(tmp_path):
    code, stdout, stderr = report("--import", "guidellm", str(DATA), str(tmp_path))
    assert code == 0, stderr
    run = Path(stdout.strip())
    summary = json.loads((run / "summary.json").read_text())
    table = pd.read_parquet(run / "requests.parquet")
    source = json.loads((DATA / "benchmarks.json").read_text())
    requests = source["benchmarks"][0]["requests"]["successful"]
    assert summary["completed"] == len(requests) == 8 and summary["failed"] == 0
    assert summary["client_version"] == "0.8.1"
    # synchronous, one at a time: the first request misses, the others hit the 32-token prefix
    assert table["cached_tokens"].tolist() == [0] + [32] * 7
    assert summary["prompt_tokens_cached"] == 224 == sum(r["cached_tokens"] for r in requests)
    assert summary["mean_itl_ms"] is None  # guidellm keeps no per-token gaps
    ttft = {r["request_id"]: r["time_to_first_token_ms"] for r in requests}
    assert dict(zip(table["request_id"], table["ttft_ms"])) == pytest.approx(ttft)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["client"]["model"] == "prefixbench/smollm2"


@pytest.mark.parametrize(
    "body, needle",
    [
        ('{"benchmarks": [', "not JSON"),
        ('{"metadata": {}, "benchmarks": []}', "not a guidellm report"),
        ('{"metadata": {"guidellm_version": "0.8.1"}, "benchmarks": []}', "without benchmarks"),
    ],
)
def test_bad_reports_are_one_line_and_no_run(tmp_path, body, needle):
    (tmp_path / "benchmarks.json").write_text(body)
    out = tmp_path / "out"
    code, stdout, stderr = report("--import", "guidellm", str(tmp_path), "--out", str(out))
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()
