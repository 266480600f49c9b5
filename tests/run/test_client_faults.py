"""The live-server client against a server that answers badly (issue 37, the client's classes).

A real aiohttp server on loopback (tests/fake_server.py) returns each malformed answer; the harness
drives it as `server=vllm`. The promises: every read is bounded (class 1); a malformed answer is one
`error:` line and exit 2 or a failed run, never a traceback (class 5); the crash handler always
writes its summary (class 6); everything reported is checked before use, and a run's status comes
from its rows (class 7). A bad server leaves no run folder.
"""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path

import pandas as pd
import pytest

from harness.metrics.format import format_summary
from tests.fake_server import MIB, FakeServer, Script
from tests.harness_util import run_harness

VOCAB = 1024
WORKLOAD = [
    "workload=system_prompt",
    "workload.num_groups=1",
    "workload.prompts_per_group=2",
    "workload.system_prompt_len=32",
    "workload.question_len=8",
    "workload.output_len=4",
]
QUIET = ["warmup.enabled=false", "load.max_concurrency=1", "server.twin=false"]


def drive(script: Script, tokenizer: Path, run_dir: Path, *overrides: str):
    with FakeServer(script) as url:
        args = ["server=vllm", f"server.url={url}", f"server.tokenizer={tokenizer}"]
        return run_harness([*args, *WORKLOAD, *QUIET, *overrides], run_dir)


def errors(run) -> list[str]:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    return [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]


def assert_bad_server(run, needle: str) -> None:
    """One `error:` line naming the server, exit 2, and no run folder left behind."""
    lines = errors(run)
    assert run.returncode == 2, run.stderr[-3000:]
    assert len(lines) == 1 and "server" in lines[0] and needle in lines[0], lines
    assert not run.run_dir.exists(), sorted(p.name for p in run.run_dir.iterdir())


def assert_failed_rows(run, needle: str) -> pd.DataFrame:
    """Every request a failed row with its reason; the run failed (exit 1), one line says so."""
    lines = errors(run)
    assert run.returncode == 1, run.stderr[-3000:]
    summary = run.summary
    assert summary["status"] == "failed" and summary["completed"] == 0, summary
    assert summary["failed"] == 2 and summary["failed_share"] == 1.0
    assert lines == [f"error: run failed: {summary['error']}"]
    assert summary["error"].startswith("all 2 requests failed")
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    assert (table["status"] != "ok").all() and table["error"].str.contains(
        needle, regex=False
    ).all(), table[["status", "error"]].to_string()
    assert summary["hit_rate"] is None and summary["prompt_tokens_cached"] == 0
    return table


# ---------------------------------------------------------------- class 1: bounded reads


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize(
    "flood, needle",
    [
        ("models_flood_bytes", "larger than the 4194304 bytes allowed"),
        ("metrics_flood_bytes", "does not report its block (page) size"),
    ],
)
def test_an_endless_discovery_answer_is_cut_at_its_cap(flood, needle, tokenizer, tmp_path):
    script = Script(**{flood: 512 * MIB})
    before = _max_rss_bytes()
    run = drive(script, tokenizer, tmp_path / "run")
    assert_bad_server(run, needle)
    assert script.sent_bytes < 128 * MIB  # the client stopped reading near its cap, not at 512 MiB
    assert _max_rss_bytes() - before < 200 * MIB


def test_an_endless_version_answer_is_cut_and_the_run_goes_on(tokenizer, tmp_path):
    script = Script(version_flood_bytes=512 * MIB)
    run = drive(script, tokenizer, tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.summary["server_version"] is None and run.summary["completed"] == 2
    assert script.sent_bytes < 128 * MIB


def test_an_endless_stream_line_is_a_failed_request(tokenizer, tmp_path):
    script = Script(stream_flood_bytes=512 * MIB, usage_only_on=None)
    run = drive(script, tokenizer, tmp_path / "run", "server.reset_cache=false")
    table = assert_failed_rows(run, "bad reply: the completion stream: a stream line is longer")
    assert (table["status"] == "bad_reply").all()
    assert script.sent_bytes < 2 * 128 * MIB  # two requests, each cut near its 8 MiB line cap


# ---------------------------------------------------------------- class 5: malformed answers


@pytest.mark.parametrize(
    "script, needle",
    [
        (Script(models_body=b"<html>garbage"), "GET /v1/models: not valid JSON"),
        (Script(models_body=b'[{"id": "m"}]'), "GET /v1/models must be a JSON object, got list"),
        (Script(models_body=b'{"data": [1, "m"]}'), "data[0] must be a JSON object, got int"),
        (Script(models_body=b'{"data": [{"id": 7}]}'), "data[0].id must be a model name"),
        (Script(models_body=b'{"data": {"id": "m"}}'), "`data` must be a list, got dict"),
        (Script(models_body=b'{"data": [{"id": "m", "max_model_len": NaN}]}'), "NaN is not"),
        (Script(block_size="0"), "block_size='0' must be an integer from 1 to 4096"),
        (Script(block_size="NaN"), "block_size='NaN' must be an integer"),
        (Script(num_gpu_blocks="1e12"), "num_gpu_blocks='1e12' must be an integer"),
        (Script(reset_status=500), "POST /reset_prefix_cache answered HTTP 500"),
    ],
    ids=[
        "models garbage", "models a list", "entries not objects", "id not a string",
        "data not a list", "NaN length", "block_size 0", "block_size NaN", "huge block count",
        "reset 500",
    ],
)  # fmt: skip
def test_a_malformed_server_answer_is_one_line_and_exit_2(script, needle, tokenizer, tmp_path):
    assert_bad_server(drive(script, tokenizer, tmp_path / "run"), needle)


def test_a_kv_pool_the_twin_cannot_hold_is_refused_before_it_is_allocated(tokenizer, tmp_path):
    run = drive(Script(), tokenizer, tmp_path / "run", "server.kv_capacity_tokens=1000000000000")
    assert_bad_server(run, "the twin holds at most 16777216 blocks")


def test_a_warm_up_that_never_answers_is_one_line_and_exit_2(tokenizer, tmp_path):
    run = drive(
        Script(hang=True),
        tokenizer,
        tmp_path / "run",
        "warmup.enabled=true",
        "warmup.num_requests=1",
        "warmup.prompt_len=16",
        "warmup.output_len=2",
        "server.read_timeout_s=1",
    )
    assert_bad_server(run, "the warm-up request got no complete reply (timeout")


def test_a_nan_hit_counter_is_not_used_and_said(tokenizer, tmp_path):
    run = drive(Script(hits="NaN"), tokenizer, tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = run.summary
    assert summary["server_hits_delta"] is None and summary["counters_agree"] is None
    assert any("prefix_cache_hits_total is nan" in w for w in summary["warnings"]), summary


def test_a_counter_that_goes_back_is_not_used(tokenizer, tmp_path):
    from harness.live_server.record import _delta

    warnings: list[str] = []
    assert _delta(100.0, 40.0, "hits", warnings) is None
    assert warnings == [
        "/metrics: counter hits went back from 100 to 40 (restarted?); its delta is not used"
    ]
    assert _delta(40.0, 100.0, "hits", []) == 60


# ---------------------------------------------------------------- class 6: the crash handler


@pytest.mark.parametrize(
    "usage, needle",
    [
        ({"prompt_tokens_details": {"cached_tokens": "12"}}, "cached_tokens must be an integer, got '12'"),
        ({"prompt_tokens_details": {"cached_tokens": math.nan}}, "NaN is not a JSON number"),
        ({"prompt_tokens_details": {"cached_tokens": [1, 2]}}, "cached_tokens must be an integer, got [1, 2]"),
        ({"prompt_tokens": "40"}, "prompt_tokens must be an integer, got '40'"),
        ({"prompt_tokens": math.nan}, "NaN is not a JSON number"),
        ({"prompt_tokens": [40]}, "prompt_tokens must be an integer, got [40]"),
    ],
    ids=["cached str", "cached NaN", "cached list", "prompt str", "prompt NaN", "prompt list"],
)  # fmt: skip
def test_ill_typed_usage_is_a_failed_row_with_a_summary(usage, needle, tokenizer, tmp_path):
    run = drive(Script(usage=usage), tokenizer, tmp_path / "run")
    table = assert_failed_rows(run, needle)
    assert (table["status"] == "bad_reply").all()


@pytest.mark.parametrize("bad", ["12", None, [1, 2], {"x": 1}])
def test_the_crash_handler_writes_its_summary_whatever_the_rows_hold(bad, tmp_path):
    """Rows of the wrong type (written by an older client, or by hand): the rows file is kept,
    the summary says so, and nothing raises."""
    from harness.run.compose import start
    from harness.run.execute import _close

    out, rows = start(tmp_path / "run", overwrite=False)
    rows.append({"request_id": "r0", "cached_tokens": bad, "prompt_tokens": "x", "arrival_s": 0})
    assert _close(out, rows, "failed", "boom") == 1
    summary = json.loads(out.summary_path.read_text())
    assert summary["status"] == "failed" and summary["completed"] == 1
    assert summary["error"].startswith("boom; its rows were kept as rows.jsonl")
    assert out.rows_path.exists() and not out.requests_path.exists()


# ---------------------------------------------------------------- class 7: checked, rows decide


def test_every_request_refused_is_a_failed_run(tokenizer, tmp_path):
    run = drive(Script(completion_status=500), tokenizer, tmp_path / "run")
    table = assert_failed_rows(run, "scripted failure")
    assert (table["http_status"] == 500).all()


@pytest.mark.parametrize("num_tokens", [2, None], ids=["2 of 4 tokens", "all 4 tokens"])
def test_a_stream_without_its_done_is_a_failed_request(num_tokens, tokenizer, tmp_path):
    run = drive(Script(no_done=True, num_tokens=num_tokens), tokenizer, tmp_path / "run")
    table = assert_failed_rows(run, "the stream ended without its [DONE] terminator")
    assert (table["status"] == "failed").all()


@pytest.mark.parametrize(
    "script, needle",
    [
        (Script(usage={"prompt_tokens_details": {"cached_tokens": -500}}), "must be between 0 and"),
        (
            Script(usage={"prompt_tokens_details": {"cached_tokens": 10**9}}),
            "must be between 0 and",
        ),
        (Script(usage={"prompt_tokens_details": {"cached_tokens": 41}}), "more than the 40 prompt"),
        (Script(num_tokens=1_000_000), "sample 0 got 5 tokens or more for max_tokens=4"),
        (Script(usage={"completion_tokens": 10**6}), "completion_tokens 1000000 is more than max"),
    ],
    ids=["cached -500", "cached 1e9", "cached > prompt", "1M tokens", "usage 1M tokens"],
)
def test_numbers_no_server_can_mean_are_failed_rows(script, needle, tokenizer, tmp_path):
    run = drive(script, tokenizer, tmp_path / "run")
    table = assert_failed_rows(run, needle)
    assert (table["status"] == "bad_reply").all()
    assert script.num_requests == 2  # the client stopped reading the flood, not the run


def test_a_partial_share_of_failures_is_recorded_and_shown(tokenizer, tmp_path):
    script = Script(usage={"prompt_tokens_details": {"cached_tokens": -1}}, usage_only_on=1)
    run = drive(script, tokenizer, tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    summary = run.summary
    assert (summary["completed"], summary["failed"], summary["failed_share"]) == (1, 1, 0.5)
    assert summary["bad_replies"] == 1
    table = format_summary(summary)
    assert "Failed requests:                         1" in table
    assert "Failed share (%):                        50.00" in table
