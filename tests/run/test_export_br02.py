"""Every in-process target's run exported as a Benchmark Report v0.2, loaded back with
llm-d-benchmark's own package (its Pydantic models and its JSON schema) and compared with the
run: the engine, the simulated executor, a simulated fleet, and the report fixtures' runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.export_support import br_package, export, load_back
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness
from tests.report_support import write_results_tree

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]
TARGETS = {
    "engine": [],
    "simulated": SIM,
    "fleet": [*SIM, "fleet.replicas=3", "fleet.router=cache_aware"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    br_package()
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for kind, extra in TARGETS.items():
        run = run_harness(merged(SMALL, SYSTEM_PROMPT_SMALL, extra), root / kind)
        assert run.returncode == 0, run.stderr
        out[kind] = run.run_dir
    return out


@pytest.mark.parametrize("kind", list(TARGETS))
def test_a_run_round_trips_through_the_package(runs, kind, tmp_path):
    run_dir = runs[kind]
    code, stdout, stderr = export("--format", "br0.2", str(run_dir), "--out", str(tmp_path))
    assert code == 0, stderr
    path = tmp_path / f"{kind}.br0.2.json"
    assert stdout.split() == [str(path)]
    report = load_back(path)
    summary = json.loads((run_dir / "summary.json").read_text())
    table = pd.read_parquet(run_dir / "requests.parquet")

    assert report.version == "0.2.1"
    load = report.scenario.load.standardized
    assert (load.prefix.prefix_len.value, load.prefix.num_groups) == (48, 2)
    assert (load.prefix.num_users_per_group, load.prefix.num_prefixes) == (3, 1)
    assert load.input_seq_len.value == 56 and load.output_seq_len.value == 4

    engine, cache = report.scenario.stack[0].standardized, report.scenario.stack[1].standardized
    assert engine.kind == "inference_engine" and engine.tool == "prefixbench-apc"
    assert engine.replicas == (3 if kind == "fleet" else 1)
    assert cache.model_extra["block_size_tokens"] == 16
    assert cache.model_extra["kv_capacity_tokens"] == 4096
    assert cache.model_extra["executor"] == ("real" if kind == "engine" else "simulated")
    if kind != "engine":
        assert cache.model_extra["hardware_preset"] == "h100_llama3_8b_bf16"
        assert "simulated: h100_llama3_8b_bf16" in engine.accelerator.model

    agg = report.results.request_performance.aggregate
    assert agg.requests.total == len(table) == summary["completed"]
    ttft = agg.latency.time_to_first_token
    assert ttft.units == "ms"
    assert ttft.p50 == pytest.approx(float(np.percentile(table["ttft_ms"], 50)))
    assert ttft.p99 == pytest.approx(float(np.percentile(table["ttft_ms"], 99)))
    assert agg.throughput.total_token_rate.mean == pytest.approx(summary["total_token_throughput"])

    obs = report.results.observability
    assert obs.components[0].aggregate.cache_hit_rate.mean == pytest.approx(summary["hit_rate"])
    cache_facts = obs.model_extra["prefix_cache"]
    assert cache_facts["cached_tokens_sum"] == int(table["cached_tokens"].sum())
    assert cache_facts["ideal_hit_rate"] == pytest.approx(summary["ideal_hit_rate"])
    assert cache_facts["theoretical_hit_rate_capped"] == summary["theoretical_hit_rate_capped"]
    assert cache_facts["granularity_loss"] == pytest.approx(0.0)  # 48-token prefix: 3 blocks
    if kind == "fleet":
        replicas = [c for c in obs.components if c.replica_id is not None]
        assert len(replicas) == 3
        assert cache_facts["fleet"]["fleet_router"] == "cache_aware"


def test_the_report_fixtures_export_with_report_export(tmp_path):
    """`harness.report --export br0.2` over a results tree: every finished run, none of the
    failed one; each document loads with the package."""
    from harness.report.build import main as report_main

    root = write_results_tree(tmp_path / "results")
    out = tmp_path / "br"
    assert report_main([str(root), "--export", "br0.2", "--out", str(out)]) == 0
    written = sorted(out.iterdir())
    finished = [p for p in root.rglob("summary.json") if '"ok"' in p.read_text()]
    assert len(written) == len(finished) == 29  # 20 overhead runs, 9 capacity ones
    for path in written:
        assert load_back(path).results.request_performance.aggregate.requests.total == 3
