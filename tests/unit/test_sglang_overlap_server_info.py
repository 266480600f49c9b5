"""The twin follows a live SGLang server's event loop: overlap or not, read from its server info.

The two server infos are GET /get_server_info of SGLang 0.5.23 on this CPU (scripts/
start_sglang.sh as is, and with --disable-overlap-schedule), captured from the live server. On a
CPU the forward blocks its launch, so under overlap a request that arrives while batch N runs
joins batch N+1, formed before N's prompts are in the tree (engine.overlap_blocking_forward).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from engines.config import EngineConfig
from harness.live_server.config import ServerConfig
from harness.live_server.discovery import _scheduling, sglang_overlap
from harness.live_server.flavours import FLAVOURS
from harness.live_server.http_client import ServerClient
from harness.live_server.twin import ServerFacts, twin_engine_config
from tests.stepwise import request, step_engine

INFO = Path(__file__).resolve().parents[1] / "data" / "sglang_server_info"


def info(name: str) -> dict:
    return json.loads((INFO / f"{name}.json").read_text())


@pytest.mark.parametrize("name, overlap", [("overlap_default", True), ("overlap_disabled", False)])
def test_the_loop_is_read_from_the_schedulers_own_arguments(name, overlap):
    body = info(name)
    assert body["version"] == "0.5.23" and body["device"] == "cpu"
    found = sglang_overlap(body)
    assert found is not None
    assert found.overlap is overlap and found.blocking_forward is True
    assert found.source == f"internal_states disable_overlap_schedule={not overlap}, device=cpu"


def test_without_internal_states_the_launchers_copy_is_read():
    body = info("overlap_disabled")
    del body["internal_states"]
    found = sglang_overlap(body)
    assert found is not None and found.overlap is False
    assert found.source == "disable_overlap_schedule=True, device=cpu"


def test_a_server_info_that_does_not_say_is_none():
    body = info("overlap_default")
    del body["internal_states"], body["disable_overlap_schedule"]
    assert sglang_overlap(body) is None
    assert sglang_overlap(["not", "a", "dict"]) is None


def facts(overlap: bool | None, blocking: bool = True) -> ServerFacts:
    return ServerFacts(1, 65536, 64, 4096, None, overlap=overlap, overlap_blocking_forward=blocking)


@pytest.mark.parametrize("overlap", [True, False])
def test_the_twin_runs_the_servers_loop_whatever_engine_said(overlap):
    for said in (True, False):
        cfg = twin_engine_config(EngineConfig(cache="radix", overlap=said), facts(overlap))
        assert cfg.overlap is overlap and cfg.overlap_blocking_forward is True


def test_a_server_without_the_loop_leaves_the_engine_as_it_was():
    cfg = twin_engine_config(EngineConfig(cache="radix", overlap=True), facts(None))
    assert cfg.overlap is True and cfg.overlap_blocking_forward is False
    plain = twin_engine_config(EngineConfig(cache="radix", overlap=False), facts(None))
    assert plain.overlap is False
    vllm = twin_engine_config(EngineConfig(cache="apc"), facts(False))  # not SGLang's word
    assert vllm.overlap is True and vllm.scheduler_design == "vllm"  # the knob's default, unread


PROMPT = np.random.default_rng(5).integers(100, 1000, 60).tolist()


@pytest.mark.parametrize(
    "overlap, blocking, cached",
    [
        (False, False, 60),  # plain: joins step 1, after A's prompt was inserted
        (True, False, 60),  # overlap on a GPU: received after step 1 formed, joins step 2
        (True, True, 0),  # overlap on a CPU: joins step 1, formed before A's insert
    ],
)
def test_a_request_arriving_during_a_prefill(overlap, blocking, cached):
    """A's prompt is prefilled in step 0; B, sharing all of it, arrives while step 0 runs."""
    engine = step_engine(
        cache="radix",
        block_size=1,
        decode_runs=False,
        overlap=overlap,
        overlap_blocking_forward=blocking,
    )
    start = engine.clock.now()
    engine.add_request(request("a", PROMPT, max_new=8), start)
    engine.step()
    engine.add_request(request("b", PROMPT + [5, 6], max_new=1), (start + engine.clock.now()) / 2)
    while engine.has_work:
        engine.step()
    got = {r.request_id: r.cached_tokens for r in engine.records}
    assert got == {"a": 0, "b": cached}


def test_an_sglang_server_has_no_asynchronous_scheduling_to_report():
    """The run used to print `server_async_scheduling: true` ("assumed") for SGLang, which has no
    such mode; its overlap loop is the fact that matters and is read apart."""
    scfg = ServerConfig(flavour="sglang")
    found = asyncio.run(_scheduling(ServerClient(scfg), scfg, FLAVOURS.get("sglang")))
    assert found[0] is None and "overlap" in found[1]
