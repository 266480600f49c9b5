"""A live SGLang 0.5.23 server as the target (docs/servers.md §2), measured vs the radix twin.

Opt-in: it runs only where `bash scripts/setup_sglang.sh` has made `.venv-sglang` (skipped
otherwise, under CI too: SGLang's CPU setup uses placeholder kernel and torchvision packages and
is not part of CI). One server per module (scripts/start_sglang.sh, page size 1, 65,536 KV
tokens), stopped by its PID. One request at a time, closed-loop multi-turn and system_prompt:
every request's reported cached tokens equal the twin's, and the server's counter agrees. No
engine fact is passed by hand: the twin runs on what GET /get_server_info states.
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from harness.builtin_server.server import free_port
from tests.harness_util import ROOT, run_harness
from tests.sglang_process import stop_sglang

pytestmark = pytest.mark.sglang

VENV = ROOT / ".venv-sglang"
KV_TOKENS = 65536  # scripts/start_sglang.sh --max-total-tokens
FAST = ["warmup.num_requests=2", "warmup.prompt_len=64", "warmup.output_len=2"]


@pytest.fixture(scope="module")
def sglang_url():
    if not (VENV / "bin" / "python").exists():
        pytest.skip("SGLang is opt-in: run `bash scripts/setup_sglang.sh` to make .venv-sglang")
    port = free_port()
    env = {**os.environ, "SGLANG_MAX_TOTAL_TOKENS": str(KV_TOKENS)}
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "start_sglang.sh"), str(port)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=660,
    )  # fmt: skip
    pid_file = ROOT / ".cache" / "sglang.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        if pid is not None:
            stop_sglang(pid)


def sglang_run(url: str, tmp_path, name: str, *overrides: str):
    args = [
        "server=sglang",
        f"server.url={url}",
        "load.max_concurrency=1",
        "save_tokens=true",
        *FAST,
        *overrides,
    ]
    run = run_harness(args, tmp_path / name)
    assert run.returncode == 0, run.stderr[-2000:]
    assert_facts_read(json.loads((run.run_dir / "manifest.json").read_text())["server"])
    return run.summary, pd.read_parquet(run.run_dir / "requests.parquet")


def assert_facts_read(server: dict) -> None:
    """The twin's engine facts are the server's own, each from its /get_server_info."""
    assert server["block_size"] == 1 and server["kv_capacity_tokens"] == KV_TOKENS
    assert server["max_num_batched_tokens"] == 4096  # SGLang's chunked_prefill_size on CPU
    assert server["max_num_seqs"] == 2048  # the running-request limit SGLang derived
    sources = server["facts_sources"]
    assert sources["block_size"] == "internal_states page_size=1"
    assert sources["kv_capacity_tokens"] == f"max_total_num_tokens={KV_TOKENS}"
    assert sources["max_num_seqs"].startswith("internal_states effective_max_running")
    assert sources["schedule_policy"] == "internal_states schedule_policy=fcfs"


def assert_exact(summary: dict, table: pd.DataFrame) -> None:
    assert summary["failed"] == 0 and summary["one_at_a_time"] is True
    assert summary["cache_flushed"] is True and summary["reset_probe_cached_tokens"] == 0
    assert summary["twin_requests"] == summary["twin_matches"] == len(table)
    assert (table["cached_tokens"] == table["predicted_cached_tokens"]).all()
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    assert summary["prompt_tokens_cached"] > 0
    # SGLang splits each reply's cached tokens per tier when asked (sglext, in a chunk of its
    # own): this server has no HiCache, so all of them are the device's
    assert table["host_cached_tokens_reported"].all()
    assert (table["host_cached_tokens"] == 0).all()
    assert summary["reported_host_cached_tokens_sum"] == 0


def test_closed_loop_multiturn_equals_the_radix_twin(sglang_url, tmp_path):
    """Answers of 48 tokens: turn k+1 holds SGLang's own tokens for turn k, token-exact."""
    summary, table = sglang_run(
        sglang_url, tmp_path, "mt", "workload=multiturn", "workload.answer_len=48"
    )
    assert summary["prompt_sources"] == {"scripted": 4, "returned": 8}
    assert summary["server_version"] == "0.5.23"
    assert_exact(summary, table)


def test_system_prompt_equals_the_radix_twin(sglang_url, tmp_path):
    summary, table = sglang_run(sglang_url, tmp_path, "sp", "workload=system_prompt")
    assert_exact(summary, table)
    assert summary["block_size_or_page_size"] == 1  # token-exact matching, not blocks
