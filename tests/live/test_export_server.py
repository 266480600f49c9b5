"""A live-server run (the built-in server in this process, on a loopback socket, driven by
`server=vllm`) exported as a Benchmark Report v0.2 and loaded back with llm-d-benchmark's
package: the server as the engine component, what the harness discovered from it as the cache
component, the twin as a component of its own and its agreement under observability."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from tests.export_support import br_package, export, load_back
from tests.harness_util import SYSTEM_PROMPT_SMALL, run_harness

KNOBS = ["engine.kv_capacity_tokens=4096", "engine.max_num_batched_tokens=256"]


def test_a_server_run_round_trips_through_the_package(tmp_path, tokenizer):
    br_package()
    cfg = compose_config(["engine=apc", "model=tiny", "device=cpu", *KNOBS])
    with InProcessServer(prepare(cfg)) as server:
        run = run_harness(
            [
                "server=vllm",
                f"server.url={server.url}",
                f"server.tokenizer={tokenizer}",
                "engine=apc",
                "server.max_num_batched_tokens=256",
                "warmup.enabled=false",
                "load.max_concurrency=1",  # one at a time: the twin's prediction is exact
                *SYSTEM_PROMPT_SMALL,
            ],
            tmp_path / "served",
        )
    assert run.returncode == 0, run.stderr[-2000:]
    code, _, err = export("--format", "br0.2", str(run.run_dir), "--out", str(tmp_path / "br"))
    assert code == 0, err
    report = load_back(tmp_path / "br" / "served.br0.2.json")
    summary = json.loads((run.run_dir / "summary.json").read_text())
    table = pd.read_parquet(run.run_dir / "requests.parquet")

    engine, cache, twin = (c.standardized for c in report.scenario.stack)
    assert engine.tool == "vllm-server" and engine.tool_version == summary["server_version"]
    assert engine.accelerator.count == 0
    assert cache.model_extra["design"] == "apc" and cache.model_extra["executor"] == "live server"
    assert cache.model_extra["kv_capacity_tokens"] == summary["kv_capacity_tokens"] == 4096
    assert cache.model_extra["block_size_tokens"] == 16
    assert twin.tool == "prefixbench-twin" and twin.model_extra["design"] == "apc"

    facts = report.results.observability.model_extra["prefix_cache"]
    assert facts["twin"]["twin_requests"] == facts["twin"]["twin_matches"] == len(table) == 6
    assert facts["twin"]["server_hits_delta"] == int(table["cached_tokens"].sum()) > 0
    hit = report.results.observability.components[0].aggregate.cache_hit_rate.mean
    assert hit == pytest.approx(summary["hit_rate"])
    assert report.results.request_performance.aggregate.requests.total == 6
