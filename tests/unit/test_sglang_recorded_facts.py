"""Two recorded runs against an SGLang 0.5.23 server started with non-default flags (page 16,
chunk 512, 8 running requests, lpm, conservativeness 0.5, max_prefill_tokens 8192; its server
info is tests/data/sglang_server_info/scheduling_flags.json), replayed through the twin.

Each file in tests/data/sglang_runs holds what a `server=sglang save_tokens=true` run sent and
received (prompt and reply token ids, send and finish times) and the cached tokens the server
reported per request. On the facts read from the server info the twin is exact on both; on the
facts the `server=sglang` preset gave before they were read (page 1, 64 running, chunk 2048,
fcfs) it is not. No server is needed: this pins what the live runs measured (docs/servers.md
§2.3).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from engines.config import EngineConfig
from harness.live_server.config import ServerConfig
from harness.live_server.discovery import sglang_overlap
from harness.live_server.driver import Sent
from harness.live_server.facts import server_facts
from harness.live_server.http_client import ChoiceOut, Reply
from harness.live_server.twin import ServerFacts, predict
from workloads.request import Request

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = sorted(p.name.removesuffix(".json.gz") for p in (DATA / "sglang_runs").glob("*.json.gz"))


def load(name: str) -> dict:
    with gzip.open(DATA / "sglang_runs" / f"{name}.json.gz", "rt") as f:
        return json.load(f)


def sent_of(case: dict) -> list[Sent]:
    out = []
    for r in case["requests"]:
        req = Request(
            request_id=r["request_id"], prompt_ids=tuple(r["prompt_ids"]), after=r["after"]
        )
        reply = Reply("ok", 200, None, r["send_s"], r["end_s"], (ChoiceOut(list(r["output_ids"])),))
        out.append(Sent(req, tuple(r["prompt_ids"]), "recorded", r["send_s"], reply, 0.0))
    return out


def read_facts(case: dict) -> ServerFacts:
    body = json.loads((DATA / "sglang_server_info" / case["server_info"]).read_text())
    facts = server_facts(ServerConfig(flavour="sglang"), {}, body, None, True, "not vLLM")
    loop = sglang_overlap(body)
    assert loop is not None and loop.overlap and loop.blocking_forward
    return dataclasses.replace(facts, overlap=True, overlap_blocking_forward=True)


def exact(case: dict, facts: ServerFacts) -> int:
    one_at_a_time = case["max_concurrency"] == 1
    twin = predict(sent_of(case), EngineConfig(cache="radix"), facts, one_at_a_time)
    return sum(twin.predicted[k] == v for k, v in case["cached_tokens"].items())


def test_the_recorded_runs_are_there():
    assert CASES == ["flags-multiturn-one-at-a-time", "flags-system_prompt-burst"]


@pytest.mark.parametrize("name", CASES)
def test_on_the_servers_own_facts_the_twin_is_exact(name):
    case = load(name)
    facts = read_facts(case)
    assert (facts.block_size, facts.max_num_seqs, facts.max_num_batched_tokens) == (16, 8, 512)
    assert facts.schedule_policy == "lpm"
    assert exact(case, facts) == len(case["cached_tokens"])


@pytest.mark.parametrize("name", CASES)
def test_on_the_facts_the_preset_gave_before_it_is_not(name):
    case = load(name)
    before = dataclasses.replace(
        read_facts(case),
        block_size=1,
        max_num_seqs=64,
        max_num_batched_tokens=2048,
        schedule_policy=None,
        max_prefill_tokens=None,
        schedule_conservativeness=None,
    )
    assert exact(case, before) < len(case["cached_tokens"])
