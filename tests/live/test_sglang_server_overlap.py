"""A live SGLang 0.5.23 server with its overlap loop on (its default) and off: the twin runs the
server's loop, read from GET /get_server_info, and predicts each request's cached tokens.

Opt-in like tests/live/test_sglang_server.py (marker `sglang`, skipped where .venv-sglang is
missing, CI too). One server at a time (scripts/start_sglang.sh, then with
--disable-overlap-schedule), stopped by its PID. The burst is closed-loop multi-turn: 4 users
sharing a 256-token system prompt, 3 rounds. Which first turns share a prefill batch is set by
arrival times (sub-millisecond apart here), so the server's log says how it batched them; the
measured runs are in docs/servers.md §2.2.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pandas as pd
import pytest

from harness.builtin_server.server import free_port
from tests.harness_util import ROOT, run_harness
from tests.sglang_process import stop_sglang

pytestmark = pytest.mark.sglang

VENV = ROOT / ".venv-sglang"
LOG = ROOT / ".cache" / "sglang.log"
KV_TOKENS = 65536
FAST = ["warmup.num_requests=2", "warmup.prompt_len=64", "warmup.output_len=2"]
PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def start(*flags: str) -> tuple[str, int | None]:
    port = free_port()
    env = {**os.environ, "SGLANG_MAX_TOTAL_TOKENS": str(KV_TOKENS)}
    started = subprocess.run(
        ["bash", str(ROOT / "scripts" / "start_sglang.sh"), str(port), *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=660,
    )  # fmt: skip
    pid_file = ROOT / ".cache" / "sglang.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    if started.returncode != 0:
        stop_sglang(pid)
        pytest.fail(started.stderr[-2000:])
    return f"http://127.0.0.1:{port}", pid


def first_turn_batches(log_from: int, prompt_len: int) -> list[int]:
    """The measured first turns' prefill batches, in requests, from the server's own log: the
    batches whose prompts are all `prompt_len` long (warm-up and probe prompts are shorter,
    later turns longer)."""
    text = LOG.read_text(errors="replace")[log_from:]
    sizes = []
    for seqs, new, cached in PREFILL.findall(text):
        if int(new) + int(cached) == int(seqs) * prompt_len:
            sizes.append(int(seqs))
    return sizes


@pytest.mark.parametrize("flags, overlap", [((), True), (("--disable-overlap-schedule",), False)])
def test_the_twin_runs_the_servers_loop(tmp_path, flags, overlap):
    if not (VENV / "bin" / "python").exists():
        pytest.skip("SGLang is opt-in: run `bash scripts/setup_sglang.sh` to make .venv-sglang")
    url, pid = start(*flags)
    try:
        log_from = len(LOG.read_text(errors="replace"))
        args = [
            "server=sglang",
            f"server.url={url}",  # its page size, capacity and chunk: read from the server
            "save_tokens=true",
            "workload=multiturn",
            *FAST,
        ]
        run = run_harness(args, tmp_path / "mt")
        assert run.returncode == 0, run.stderr[-2000:]
        batches = first_turn_batches(log_from, 416)
    finally:
        stop_sglang(pid)
    summary, table = run.summary, pd.read_parquet(run.run_dir / "requests.parquet")
    manifest = json.loads((run.run_dir / "manifest.json").read_text())["server"]
    # the twin ran the loop the server runs, and says where that came from
    source = f"/get_server_info internal_states disable_overlap_schedule={not overlap}, device=cpu"
    assert summary["server_overlap"] is overlap and manifest["overlap"] is overlap
    assert manifest["overlap_source"] == source
    twin = summary["twin_engine"]
    assert twin["overlap"] is overlap and twin["overlap_blocking_forward"] is True
    assert twin["overlap_source"] == source
    assert (twin["kv_capacity_tokens"], twin["max_num_batched_tokens"]) == (KV_TOKENS, 4096)
    assert summary["failed"] == 0 and summary["twin_requests"] == len(table) == 12
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    first = table["request_id"].str.endswith("-r0")
    assert (table.loc[first, "prompt_tokens"] == 416).all()
    # a later turn is sent after its predecessor's reply: its history is in both trees
    later = table[~first]
    assert (later["cached_tokens"] == later["predicted_cached_tokens"]).all()
    # the server's first turns came in two back-to-back prefill batches (at most): without
    # overlap the second saw the first's system prompt, with overlap it was formed before that
    # prompt reached the tree (on this CPU, whatever arrived during the first forward)
    assert sum(batches) == 4 and len(batches) <= 2, batches
    second = batches[1] if len(batches) == 2 else 0
    assert int(table.loc[first, "cached_tokens"].sum()) == (0 if overlap else 256 * second)
    if overlap or batches == [1, 3]:
        # the twin's first step holds the first arrival alone, the rest join its second step
        assert summary["twin_matches"] == 12
        assert (table["cached_tokens"] == table["predicted_cached_tokens"]).all()
    else:
        # plain, batched unlike the twin: only the first turns can differ
        assert summary["twin_matches"] >= 8
