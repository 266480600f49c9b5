"""The real routers (sglang-router 0.3.2, vllm-router 0.1.17) in front of two built-in servers:
the routing twin predicts at least 99% of the decisions, one request at a time. (cache_aware one
at a time sends every prompt to one worker on these streams; it is checked on a stream that
spreads, at 3 workers: tests/live/test_fleet_learned.py.)

The routers come from scripts/setup_routers.sh (.venv-routers): missing, a failure under CI=true,
else a skip. The two workers start once for all cases; each case starts and stops its router.
"""

from __future__ import annotations

import pytest

from harness.fleet.config import FleetConfig
from harness.routers.fleet import order_only, route_through, streams
from tests.router_util import module_workers, need_router

CASES = [
    ("sglang", "round_robin"),
    ("vllm", "round_robin"),
    ("vllm", "consistent_hash"),
    ("vllm", "kv_aware"),
]


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    yield from module_workers(tmp_path_factory, "fleet-real", 2)


@pytest.mark.parametrize("kind, policy", CASES)
def test_the_routing_twin_predicts_the_real_router(kind, policy, workers):
    need_router(kind)
    fleet, out = workers
    stream, warm = streams(policy, num_groups=3, per_group=5, num_workers=2)
    cfg = FleetConfig(replicas=2, router=policy)
    decisions = route_through(kind, cfg, fleet, stream, out, warm)
    assert len(decisions) == len(stream)
    equal = [d.predicted == d.actual for d in decisions]
    if policy == "kv_aware":  # groups 0 and 2 were placed on worker 0, group 1 on worker 1
        assert [d.actual for d in decisions] == [int(d.request_id[1]) % 2 for d in decisions]
        assert all(d.cached_tokens == 64 for d in decisions)  # the whole shared prefix, always
    elif policy == "round_robin":  # consistent_hash: the twin's ring is vllm-router's
        assert {d.actual for d in decisions} == {0, 1}
    assert sum(equal) >= 0.99 * len(equal), [(d.predicted, d.actual) for d in decisions]


@pytest.mark.parametrize("kind, policy", [("sglang", "round_robin"), ("vllm", "consistent_hash")])
def test_under_concurrency_the_distance_has_its_cause(kind, policy, workers):
    """Waves of 4 requests sent at once. Round robin: the router's turns are the twin's, taken in
    the order the requests reached it, so every miss is one of arrival order. consistent_hash
    keys each request by its session alone: no order or load can move it. (kv_aware under load:
    tests/live/test_fleet_kv_load.py.)"""
    need_router(kind)
    fleet, out = workers
    stream, warm = streams(policy, num_groups=3, per_group=4, num_workers=2)
    cfg = FleetConfig(replicas=2, router=policy)
    decisions = route_through(kind, cfg, fleet, stream, out, warm, concurrency=4)
    assert len(decisions) == len(stream) and {d.wave for d in decisions} == {1, 2, 3}
    misses = sum(d.predicted != d.actual for d in decisions)
    if policy == "round_robin":
        assert order_only(decisions) == misses
        assert sorted(d.actual for d in decisions) == [0] * 6 + [1] * 6
    else:
        assert misses == 0, [(d.request_id, d.predicted, d.actual) for d in decisions]
