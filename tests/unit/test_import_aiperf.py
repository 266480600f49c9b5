"""`python -m harness.report --import aiperf PATH`: aiperf 0.13.0's real output (tests/data/aiperf:
aiperf replayed trace.mooncake.jsonl, written by `harness.export --format mooncake`, against
`harness.builtin_server` model=smollm2-rand engine=apc) becomes a run the report and the exporter
read; bad input is one line, exit 2, no run folder."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from harness.report.build import main as report_main

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf"


def report(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report_main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_an_aiperf_export_becomes_a_run(tmp_path):
    code, stdout, stderr = report("--import", "aiperf", str(DATA), str(tmp_path))
    assert code == 0, stderr
    run = tmp_path / "imported" / "aiperf-aiperf"
    assert stdout.split() == [str(run)]
    summary = json.loads((run / "summary.json").read_text())
    table = pd.read_parquet(run / "requests.parquet")
    records = [json.loads(x) for x in (DATA / "profile_export.jsonl").read_text().splitlines()]
    assert summary["status"] == "ok" and summary["completed"] == len(records) == 12
    assert summary["backend"] == "aiperf" and summary["client_version"] == "0.13.0"
    # the dataset file's name before its first dot: the run the trace was exported from
    assert summary["workload"] == "rt-system_prompt"
    # every request of the replayed trace, in trace order: the server's cached tokens
    assert table["cached_tokens"].tolist() == [0, 0] + [32] * 10
    assert summary["prompt_tokens_cached"] == 320 and summary["hit_rate"] == pytest.approx(
        320 / 576
    )
    ttft = {
        r["metadata"]["x_request_id"]: r["metrics"]["time_to_first_token"]["value"] for r in records
    }
    assert dict(zip(table["request_id"], table["ttft_ms"])) == pytest.approx(ttft)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["client"]["model"] == "smollm2-rand"
    assert manifest["config"]["executor"] == "client"


def test_an_imported_run_is_reported_and_exported(tmp_path):
    assert report("--import", "aiperf", str(DATA), str(tmp_path))[0] == 0
    code, stdout, stderr = report(str(tmp_path), "--out", str(tmp_path / "report"))
    assert code == 0, stderr
    summary_csv = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert summary_csv["engine"].tolist() == ["aiperf"]
    assert report(str(tmp_path), "--export", "br0.2", "--out", str(tmp_path / "br"))[0] == 0
    doc = json.loads((tmp_path / "br" / "aiperf-aiperf.br0.2.json").read_text())
    assert doc["results"]["request_performance"]["aggregate"]["requests"]["total"] == 12
    load = doc["scenario"]["load"]["standardized"]
    assert (load["tool"], load["tool_version"]) == ("aiperf", "0.13.0")
    (engine,) = doc["scenario"]["stack"]  # a client sees the server, not its cache config
    assert engine["standardized"]["model"]["name"] == "smollm2-rand"


def _truncated(tmp_path) -> Path:
    text = (DATA / "profile_export.jsonl").read_text()
    (tmp_path / "profile_export.jsonl").write_text(text[: len(text) // 2])
    return tmp_path


def _foreign(tmp_path) -> Path:
    (tmp_path / "profile_export.jsonl").write_text('{"timestamp": 0, "input_length": 3}\n')
    return tmp_path


@pytest.mark.parametrize(
    "client, make, needle",
    [
        ("aiperf", lambda p: p / "nothing", "no aiperf profile_export.jsonl there"),
        ("aiperf", _truncated, "not JSON"),
        ("aiperf", _foreign, "not an aiperf profile_export record"),
        (
            "locust",
            lambda p: DATA,
            "unknown import client 'locust'; valid: aiperf, guidellm, inference-perf",
        ),
    ],
)
def test_bad_input_is_one_line_and_no_run(tmp_path, client, make, needle):
    source = make(tmp_path / "src") if client != "aiperf" else make(_mk(tmp_path / "src"))
    out = tmp_path / "out"
    code, stdout, stderr = report("--import", client, str(source), str(tmp_path), "--out", str(out))
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and stdout == "" and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()


def _mk(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
