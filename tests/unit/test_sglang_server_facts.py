"""The twin runs on a live SGLang server's own engine facts, read from its GET /get_server_info.

The server infos are SGLang 0.5.23's on this CPU, captured from live servers started with
scripts/start_sglang.sh: as is (`overlap_default`), and with non-default scheduling flags
(`scheduling_flags`: page 16, 32,768 KV tokens, chunk 512, 8 running requests, lpm,
conservativeness 0.5, max_prefill_tokens 8192). A value set as `server.<name>` wins over the
server's, and the manifest's sources say which came from where.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from engines.config import EngineConfig
from harness.config.errors import BadInput
from harness.live_server.config import ServerConfig
from harness.live_server.facts import server_facts
from harness.live_server.sglang_facts import Stated, sglang_facts
from harness.live_server.twin import twin_engine_config

INFO = Path(__file__).resolve().parents[1] / "data" / "sglang_server_info"


def info(name: str) -> dict:
    return json.loads((INFO / f"{name}.json").read_text())


def facts(body: object, **server: object):
    scfg = ServerConfig(flavour="sglang", **server)  # type: ignore[arg-type]
    scfg.validate()
    return server_facts(scfg, {}, body, None, True, "assumed (not a vLLM server)")


def test_the_default_servers_facts_and_where_each_is_stated():
    assert sglang_facts(info("overlap_default")) == {
        "block_size": Stated(1, "internal_states page_size"),
        "kv_capacity_tokens": Stated(65536, "max_total_num_tokens"),
        "max_num_seqs": Stated(2048, "internal_states effective_max_running_requests_per_dp"),
        "max_num_batched_tokens": Stated(4096, "internal_states chunked_prefill_size"),
        "max_prefill_tokens": Stated(16384, "internal_states max_prefill_tokens"),
        "schedule_policy": Stated("fcfs", "internal_states schedule_policy"),
        "schedule_conservativeness": Stated(1.0, "internal_states schedule_conservativeness"),
    }


def test_a_server_started_with_other_flags_is_read_as_started():
    body = info("scheduling_flags")
    assert "--page-size 16" in body["launch_command"]
    got = facts(body)
    assert (got.block_size, got.kv_capacity_tokens) == (16, 32768)
    assert (got.max_num_seqs, got.max_num_batched_tokens) == (8, 512)
    assert (got.schedule_policy, got.max_prefill_tokens) == ("lpm", 8192)
    assert got.schedule_conservativeness == 0.5
    assert got.sources["max_num_seqs"] == (
        "internal_states effective_max_running_requests_per_dp=8"
    )
    assert got.sources["kv_capacity_tokens"] == "max_total_num_tokens=32768"


def test_the_twin_runs_on_the_servers_facts_whatever_engine_said():
    engine = EngineConfig(cache="radix", block_size=4, policy="fcfs", max_prefill_tokens=999)
    cfg = twin_engine_config(engine, facts(info("scheduling_flags")))
    assert (cfg.block_size, cfg.kv_capacity_tokens) == (16, 32768)
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens) == (8, 512)
    assert (cfg.policy, cfg.max_prefill_tokens, cfg.schedule_conservativeness) == (
        "lpm",
        8192,
        0.5,
    )
    cfg.validate()


def test_a_twin_on_vllms_scheduler_keeps_its_own_knobs():
    """engine=apc under server=sglang: vLLM's scheduler has no prefill budget or
    conservativeness, so only the geometry and limits follow the server."""
    cfg = twin_engine_config(EngineConfig(cache="apc"), facts(info("scheduling_flags")))
    assert cfg.scheduler_design == "vllm"
    assert (cfg.block_size, cfg.max_num_seqs, cfg.max_num_batched_tokens) == (16, 8, 512)
    assert (cfg.policy, cfg.max_prefill_tokens, cfg.schedule_conservativeness) == (
        "fcfs",
        16384,
        1.0,
    )
    cfg.validate()


def test_a_value_set_by_hand_wins_and_its_source_names_the_servers(caplog):
    with caplog.at_level(logging.WARNING, logger="harness.live_server"):
        got = facts(info("overlap_default"), max_num_seqs=64, kv_capacity_tokens=65536)
    assert got.max_num_seqs == 64 and got.kv_capacity_tokens == 65536
    assert got.sources["max_num_seqs"] == (
        "server.max_num_seqs, over the server's "
        "internal_states effective_max_running_requests_per_dp=2048"
    )
    assert got.sources["kv_capacity_tokens"] == "server.kv_capacity_tokens"  # agrees: no note
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "server.max_num_seqs=64 overrides" in warned[0]


def test_a_server_without_chunked_prefill_gets_the_default_chunk_and_says_so():
    body = info("overlap_default")
    for state in body["internal_states"]:
        state["chunked_prefill_size"] = -1
    got = facts(body)
    assert got.max_num_batched_tokens == 2048
    assert got.sources["max_num_batched_tokens"].startswith(
        "internal_states chunked_prefill_size=-1: the server does not chunk prefills"
    )
    chosen = facts(body, max_num_batched_tokens=16384)
    assert chosen.max_num_batched_tokens == 16384
    assert chosen.sources["max_num_batched_tokens"] == (
        "server.max_num_batched_tokens; the server's internal_states chunked_prefill_size=-1"
    )


def test_ranks_that_disagree_leave_it_to_the_launchers_copy():
    body = info("overlap_default")
    body["internal_states"] = [body["internal_states"][0], {**body["internal_states"][0]}]
    body["internal_states"][1]["page_size"] = 16
    assert sglang_facts(body)["block_size"] == Stated(1, "page_size")


def test_a_bad_value_is_one_line_naming_the_field_unless_set_by_hand():
    body = info("overlap_default")
    body["internal_states"][0]["page_size"] = "16"
    with pytest.raises(BadInput, match=r"^server\.block_size: .*internal_states page_size is '16'"):
        facts(body)
    assert facts(body, block_size=16).block_size == 16


def test_a_server_info_that_states_nothing_needs_the_geometry_by_hand():
    with pytest.raises(BadInput, match="server.block_size: the server does not report"):
        facts(None)
    got = facts({"version": "0.5.22"}, block_size=1, kv_capacity_tokens=4096)
    assert (got.max_num_seqs, got.max_num_batched_tokens) == (64, 2048)
    assert got.sources["max_num_seqs"].startswith("assumed: 64")
    assert got.schedule_policy is None and got.sources["schedule_policy"] == (
        "not stated by the server"
    )


def test_a_policy_the_twin_does_not_model_leaves_engine_policy(caplog):
    body = info("overlap_default")
    body["internal_states"][0]["schedule_policy"] = "lof"
    with caplog.at_level(logging.WARNING, logger="harness.live_server"):
        got = facts(body)
    assert got.schedule_policy is None
    assert got.sources["schedule_policy"].endswith("not modelled: the twin keeps engine.policy")
    assert "'lof'" in caplog.records[0].getMessage()
    with pytest.raises(BadInput, match="server.schedule_policy: unknown policy 'lof'; valid: "):
        ServerConfig(flavour="sglang", schedule_policy="lof").validate()


def test_vllm_states_its_geometry_in_its_cache_config_metric():
    labels = {"block_size": "32", "num_gpu_blocks": "130"}
    scfg = ServerConfig(flavour="vllm", max_num_seqs=64, max_num_batched_tokens=2048)
    got = server_facts(scfg, labels, None, 2048, False, "/server_info device_config=cpu")
    assert (got.block_size, got.kv_capacity_tokens) == (32, 129 * 32)
    assert got.sources["block_size"] == "/metrics vllm:cache_config_info block_size=32"
    assert got.sources["kv_capacity_tokens"] == (
        "/metrics vllm:cache_config_info (num_gpu_blocks=130 - 1) x block 32=4128"
    )
    assert got.sources["max_num_seqs"] == "server.max_num_seqs"
    assert got.schedule_policy is None and got.max_prefill_tokens is None


def test_the_sglang_preset_leaves_every_fact_to_the_server_and_vllms_keeps_its_limits():
    from harness.run.compose import compose

    sglang = compose(["server=sglang"]).cfg.server
    names = ("block_size", "kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens")
    assert all(getattr(sglang, name) is None for name in names)
    assert (sglang.schedule_policy, sglang.max_prefill_tokens) == (None, None)
    vllm = compose(["server=vllm", "server.schedule_conservativeness=0.5"]).cfg.server
    assert (vllm.max_num_seqs, vllm.max_num_batched_tokens) == (64, 2048)  # vLLM states neither
    assert vllm.schedule_conservativeness == 0.5
    with pytest.raises(BadInput, match="server.schedule_conservativeness must be a positive"):
        ServerConfig(schedule_conservativeness=0.0).validate()
