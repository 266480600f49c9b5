"""vllm-router's kv_aware weighs the requests in flight (0.1.17): 3 built-in workers, waves of 4
requests of one group sent at once, each group's prefix placed on one worker beforehand. A long
prefix (256 tokens) keeps the whole wave on its worker; a short one (16) saves less than a few
requests in flight cost, so the router sends part of the wave to the other workers. The twin
(harness/routers/kv_cost.py) predicts every wave's workers; which request of a wave took which
worker follows the order the requests reached the router (a miss of arrival order only).

Bounded: 3 workers started once, two router starts (not one lucky start), each stopped by its PID.
"""

from __future__ import annotations

import json

import pytest

from harness.fleet.config import FleetConfig
from harness.routers.fleet import order_only, route_through
from harness.routers.streams import load_stream
from tests.router_util import module_workers, need_router

WORKERS, WIDTH = 3, 4
PREFIXES = (256, 16, 256, 16, 16)  # a long wave first: the router's first wave after its start


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    yield from module_workers(tmp_path_factory, "fleet-kv-load", WORKERS)


def test_in_flight_load_moves_kv_aware_and_the_twin_predicts_it(workers):
    need_router("vllm")
    fleet, out = workers
    stream, warm = load_stream(WORKERS, PREFIXES, WIDTH)
    cfg = FleetConfig(replicas=WORKERS, router="kv_aware")
    for start in range(2):
        where = out / f"s{start}"
        decisions = route_through("vllm", cfg, fleet, stream, where, warm, concurrency=WIDTH)
        assert len(decisions) == len(stream)
        facts = json.loads((where / "learned-vllm-kv_aware.json").read_text())
        assert facts["order_source"] == "start log" and facts["first_pick_learned"] is True
        waves = sorted({d.wave for d in decisions})
        assert len(waves) == len(PREFIXES)
        for wave, size in zip(waves, PREFIXES):
            got = [d for d in decisions if d.wave == wave]
            placed = int(got[0].request_id[1]) % WORKERS  # group g was placed on worker g mod N
            actual = sorted(d.actual for d in got)
            assert sorted(d.predicted for d in got) == actual, (start, wave, got)
            if size == 256:  # the saving outweighs any load: the whole wave stays
                assert actual == [placed] * WIDTH
            else:  # load moved part of the wave off the worker holding its prefix
                assert 1 <= actual.count(placed) < WIDTH, (start, wave, got)
        misses = sum(d.predicted != d.actual for d in decisions)
        assert order_only(decisions) == misses  # every miss is arrival order within a wave
