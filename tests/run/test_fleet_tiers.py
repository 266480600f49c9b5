"""A fleet with a host tier per replica (docs/tiers.md §9): the summary's per-tier hits add up, per
replica and over the fleet, and the replicas' tier counters and host links are summed; a tier-off
fleet's summary carries none of it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.report.build import load
from harness.report.fleet_table import fleet_table
from harness.report.tier_table import tier_table
from harness.run.execute import execute
from tests.harness_util import compose_config, run_harness, with_base

FLEET = [
    "executor=simulated",
    "hardware=h100_llama3_8b_bf16",
    "engine.kv_capacity_tokens=128",
    "engine.max_num_seqs=1",
    "workload.num_groups=4",
    "workload.prompts_per_group=4",
    "fleet.replicas=2",
    "fleet.router=round_robin",
]
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B bf16
TIERLESS_REPLICA = {"replica", "requests", "prompt_tokens", "cached_tokens", "hit_rate"}


def run(tmp_path, args: list[str]) -> tuple[dict, pd.DataFrame]:
    run_dir = tmp_path / "run"
    assert execute(compose_config(with_base([*FLEET, *args])), run_dir) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary, pd.read_parquet(run_dir / "requests.parquet")


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_per_tier_hits_add_up_to_the_fleets_cached_tokens(engine, tmp_path):
    summary, rows = run(tmp_path, [f"engine={engine}", "engine.host_tier.tokens=4096"])
    per = summary["fleet_per_replica"]
    host = [p["host_cached_tokens"] for p in per]
    assert all(h > 0 for h in host)  # each replica's own tier served hits
    assert sum(host) == summary["prompt_tokens_cached_host"] == rows["host_cached_tokens"].sum()
    assert sum(p["cached_tokens"] for p in per) == summary["prompt_tokens_cached"]
    assert summary["device_hit_rate"] + summary["host_hit_rate"] == pytest.approx(
        summary["hit_rate"]
    )
    # the replicas' counters and links, summed: what was loaded crossed a link, as did every store
    tier, link = summary["host_tier"], summary["host_link"]
    assert tier["loaded"] == summary["prompt_tokens_cached_host"]
    assert link["load_bytes"] == tier["loaded"] * KV_BYTES_PER_TOKEN
    assert link["store_bytes"] == tier["stored"] * KV_BYTES_PER_TOKEN > 0
    assert link["load_s"] == pytest.approx(link["load_bytes"] / 5e10)


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_a_storage_tier_per_replica_adds_up_like_the_host_tier(engine, tmp_path):
    """Each replica writes its own storage (both upstreams' file backends: a folder per server);
    the device, host and storage parts of every replica's hits add up to its cached tokens, and
    the replicas' storage counters and links are summed under a one-engine run's names."""
    # 8 groups over 2 x (128 device + 256 host tokens), each request seeing the ones before it:
    # prefixes pushed out of the host tier come back from storage
    args = [f"engine={engine}", "engine.host_tier.tokens=256", "engine.storage_tier.enabled=true"]
    args += ["workload.num_groups=8", "load.mode=poisson", "load.rate=2"]
    if engine == "radix":  # HiCache fetches nothing under its threshold (256): prompts are 56
        args += ["engine.storage_tier.prefetch_threshold=16"]
        args += ["engine.storage_tier.prefetch_policy=wait_complete"]
    summary, rows = run(tmp_path, args)
    per = summary["fleet_per_replica"]
    stored = [p["storage_cached_tokens"] for p in per]
    assert sum(stored) == summary["prompt_tokens_cached_storage"] > 0
    assert sum(stored) == rows["storage_cached_tokens"].sum()
    assert all(
        p["host_cached_tokens"] + p["storage_cached_tokens"] <= p["cached_tokens"] for p in per
    )
    tier, link = summary["storage_tier"], summary["storage_link"]
    # apc: the stores a replica completes once idle after its last step are counted by the tier
    # but meet no later step to price them (a single engine's run alike): one prompt's at most
    unpriced = tier["stored"] - link["write_bytes"] // KV_BYTES_PER_TOKEN
    assert tier["stored"] > 0 and 0 <= unpriced <= 64
    assert link["read_bytes"] == tier["loaded"] * KV_BYTES_PER_TOKEN


def test_a_tier_off_fleet_reports_no_tier(tmp_path):
    summary, rows = run(tmp_path, ["engine=apc"])
    assert "host_tier" not in summary and "host_link" not in summary
    assert "storage_tier" not in summary and "storage_link" not in summary
    assert all(set(p) == TIERLESS_REPLICA for p in summary["fleet_per_replica"])
    assert summary["prompt_tokens_cached_host"] == 0 and (rows["host_cached_tokens"] == 0).all()


def test_the_fleet_table_keeps_tier_off_and_tier_on_apart(tmp_path):
    """fleet.csv keyed runs by capacity and load only, so a tier sweep's two arms were averaged
    into one row (n_runs 2, a hit rate neither run had)."""
    for tokens in (0, 4096):
        run_dir = tmp_path / f"host{tokens}"
        args = ["engine=apc", f"engine.host_tier.tokens={tokens}"]
        assert execute(compose_config(with_base([*FLEET, *args])), run_dir) == 0
    table = fleet_table(load(tmp_path)[0])
    assert sorted(table["host_tier_tokens"]) == ["0", "4096"]
    assert (table["n_runs"] == 1).all()
    assert table["fleet_hit_rate"].nunique() == 2  # the tier served hits the other run lacks


def test_a_router_that_indexes_host_tiers_sends_a_prompt_back_to_its_tier(tmp_path):
    """kv_aware over device caches only sees nothing of a group whose prefix left the device,
    and spreads its prompts by load; indexing the host tiers (llm-d's precise scheduler indexes
    vLLM's CPU-offloaded blocks) sends them where a load brings the prefix back, so more of
    the fleet's hits come from the host."""
    tier = ["engine=apc", "engine.host_tier.tokens=4096", "fleet.router=kv_aware"]
    tier += ["load.mode=poisson", "load.rate=2"]  # each decision sees the caches its past left
    blind, _ = run(tmp_path / "blind", tier)
    seeing, rows = run(tmp_path / "seeing", [*tier, "fleet.index_host_tier=true"])
    assert seeing["prompt_tokens_cached_host"] > blind["prompt_tokens_cached_host"]
    assert seeing["hit_rate"] > blind["hit_rate"]
    runs = load(tmp_path)[0]  # the two routers are two rows, never averaged
    assert sorted(fleet_table(runs)["router"]) == ["kv_aware", "kv_aware+host"]
    assert sorted(tier_table(runs)["run"]) == ["apc + CPU tier", "apc + CPU tier, router sees it"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fleet.router=kv_aware", "fleet.index_host_tier=true"], "no host tier"),
        (
            ["engine.host_tier.tokens=4096", "fleet.index_host_tier=true"],
            "router 'round_robin' reads no cache",
        ),
    ],
)
def test_a_host_tier_index_needs_a_tier_and_a_router_that_reads_caches(args, needle, tmp_path):
    out = tmp_path / "run"
    done = run_harness(with_base([*FLEET, "engine=apc", *args]), out)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not out.exists()
