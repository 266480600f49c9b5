"""The real routers (sglang-router 0.3.2, vllm-router 0.1.17) in front of 3 built-in servers,
where a wrong model of the router is wrong (at 2 workers either round-robin order is a
rotation): the routing twin predicts at least 99% of the scored decisions of every policy one
request at a time on streams that spread (round robin in the router's own order, learned;
cache_aware once the groups are placed by a first wave through the router; consistent_hash on
vllm-router's own ring; kv_aware from the workers' KV events, on token ids and on text the
router has a worker tokenise), and under concurrency each miss has its cause (arrival order, a
tie not seen yet) and vllm-router's kv_aware load term holds.
The twin is scored only on decisions predicted from learned facts; its guesses and the router's
first pick are reported apart, and what it learned is recorded beside the decisions.

Bounded: the routers come from scripts/setup_routers.sh (.venv-routers): missing, a failure under
CI=true, else a skip. The 3 workers start once for the module; each case starts and stops its
router by its PID (harness.routers.fleet.processes), two starts where one could pass by luck.
"""

from __future__ import annotations

import json

import pytest

from harness.fleet.config import FleetConfig
from harness.routers.drive import one_at_a_time, order_only
from harness.routers.fleet import route_through
from harness.routers.streams import load_stream, placed_text_stream, spread_stream, streams
from tests.router_util import module_workers, need_router

WORKERS = 3
KV_WIDTH = 4  # kv_aware's load waves
KV_PREFIXES = (256, 16, 256, 16, 16)  # a long wave first: the router's first wave after its start


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    yield from module_workers(tmp_path_factory, "fleet-real", WORKERS)


@pytest.mark.parametrize("policy", ["consistent_hash", "kv_aware"])
def test_the_twin_predicts_vllm_routers_session_and_kv_policies(policy, workers):
    """consistent_hash: 9 sessions on vllm-router's own ring (harness/fleet/furc.py), each
    session's first worker predicted too; kv_aware: each group's prefix placed on worker g mod 3
    beforehand, so only a router reading the workers' real caches follows it; then 3 text groups
    placed on worker g + 1 mod 3, which the router has a worker tokenise (/tokenize) and the
    twin reads the same way."""
    need_router("vllm")
    fleet, out = workers
    groups = 3 * WORKERS if policy == "consistent_hash" else WORKERS
    stream, warm = streams(policy, num_groups=groups, per_group=3, num_workers=WORKERS)
    if policy == "kv_aware":  # the same router start: text after the token ids
        text, text_warm = placed_text_stream(WORKERS, per_group=2, num_workers=WORKERS, shift=1)
        stream, warm = stream + text, warm + text_warm
    cfg = FleetConfig(replicas=WORKERS, router=policy)
    decisions = route_through("vllm", cfg, fleet, stream, out / policy, warm)
    assert len(decisions) == len(stream)
    assert len({d.actual for d in decisions}) >= 2  # the stream spread
    if policy == "kv_aware":  # every group went where its prefix was placed, and hit all of it
        ids = [d for d in decisions if not d.request_id.startswith("t")]
        assert [d.actual for d in ids] == [int(d.request_id[1]) % WORKERS for d in ids]
        assert all(d.cached_tokens == 64 for d in ids)
        words = [d for d in decisions if d.request_id.startswith("t")]
        assert [d.actual for d in words] == [(int(d.request_id[2]) + 1) % WORKERS for d in words]
        # the prefix the twin's index credited (from the twin's /tokenize ids) is the worker's
        assert all(d.cached_tokens == d.twin_cached and d.cached_tokens >= 64 for d in words)
    assert all(d.learned for d in decisions)  # nothing to guess: the ring, the events
    assert sum(d.predicted == d.actual for d in decisions) >= 0.99 * len(decisions), decisions


@pytest.mark.parametrize("policy", ["round_robin", "consistent_hash"])
def test_under_concurrency_the_distance_has_its_cause(policy, workers):
    """vllm-router, waves of 4 requests sent at once. Round robin: the router's turns are the
    twin's (its order from the start log), taken in the order the requests reached it, so every
    miss is one of arrival order. consistent_hash keys each request by its session alone: no
    order or load can move it."""
    need_router("vllm")
    fleet, out = workers
    groups = 3 * WORKERS if policy == "consistent_hash" else WORKERS
    stream, warm = streams(policy, num_groups=groups, per_group=4 if groups == 3 else 2,
                           num_workers=WORKERS)  # fmt: skip
    cfg = FleetConfig(replicas=WORKERS, router=policy)
    where = out / f"waves-{policy}"
    decisions = route_through("vllm", cfg, fleet, stream, where, warm, concurrency=4)
    assert len(decisions) == len(stream)
    misses = sum(d.predicted != d.actual for d in decisions)
    if policy == "round_robin":
        assert order_only(decisions) == misses
        assert sorted(d.actual for d in decisions) == [0] * 4 + [1] * 4 + [2] * 4
    else:
        assert misses == 0, [(d.request_id, d.predicted, d.actual) for d in decisions]


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_round_robin_in_the_routers_own_order_at_3_workers(kind, workers):
    need_router(kind)
    fleet, out = workers
    stream, warm = streams("round_robin", num_groups=3, per_group=4, num_workers=WORKERS)
    cfg = FleetConfig(replicas=WORKERS, router="round_robin")
    decisions = route_through(kind, cfg, fleet, stream, out / f"rr-{kind}", warm)
    assert sorted(d.actual for d in decisions) == [0] * 4 + [1] * 4 + [2] * 4  # spread
    scored = [d for d in decisions if d.learned]
    guesses = [d for d in decisions if not d.learned]
    assert sum(d.predicted == d.actual for d in scored) >= 0.99 * len(scored)
    facts = json.loads((out / f"rr-{kind}" / f"learned-{kind}-round_robin.json").read_text())
    assert sorted(facts["worker_order"]) == list(range(WORKERS))
    assert facts["first_pick"] in range(WORKERS)
    if kind == "vllm":  # the start log names the order: nothing to guess
        assert facts["order_source"] == "start log" and not guesses
        assert facts["first_pick_learned"] is True
    else:  # one slot of the cycle is unknown after the first pick; the last follows
        assert facts["order_source"] == "decisions" and len(guesses) <= 1
    assert len(scored) >= len(stream) - 1


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_cache_aware_one_at_a_time_spreads_once_the_groups_are_placed(kind, workers):
    """One at a time every cold prompt goes to the router's first worker, so a stream of cold
    groups collapses onto it. Here each group's first prompt goes through the router in one
    wave (long outputs, all in flight together: each to the least loaded worker), then the rest
    one at a time: each follows its group's prefix to the worker its tree names. Two router
    starts, each its own worker order; the placement wave is taught to the twin, not scored."""
    need_router(kind)
    fleet, out = workers
    stream, waves = spread_stream(num_groups=WORKERS, per_group=4)
    cfg = FleetConfig(replicas=WORKERS, router="cache_aware")
    for start in range(2):
        decisions = route_through(
            kind, cfg, fleet, stream, out / f"spread-{kind}-s{start}", waves=waves
        )
        alone = one_at_a_time(decisions)
        assert len(alone) == len(stream) - WORKERS
        placed = {d.request_id.split("-")[0]: d.actual for d in decisions if d not in alone}
        assert len(set(placed.values())) >= 2  # the placement wave spread the groups
        # each later prompt went where its group was placed, and hit the prefix computed there
        assert all(d.actual == placed[d.request_id.split("-")[0]] for d in alone), decisions
        assert all(d.cached_tokens > 0 for d in alone)
        scored = [d for d in alone if d.learned]
        assert len(scored) == len(alone)  # no tie to guess: every prompt matched its group
        assert sum(d.predicted == d.actual for d in scored) >= 0.99 * len(scored), decisions


def test_cache_aware_ties_go_the_routers_way_and_every_miss_has_its_cause(workers):
    """sglang-router's cache_aware at 3 workers, waves of 4 (one at a time it sends every cold
    prompt to its first worker, so only waves spread a stream): two router starts, each with its
    own worker order. The first pick teaches the twin the router's first worker; a miss is
    searched for an arrival order that reproduces it (harness/routers/replay.py) and named for its
    cause."""
    need_router("sglang")
    fleet, out = workers
    stream, warm = streams("cache_aware", num_groups=6, per_group=2, num_workers=WORKERS)
    cfg = FleetConfig(replicas=WORKERS, router="cache_aware")
    for start in range(2):
        decisions = route_through("sglang", cfg, fleet, stream, out / f"ties-s{start}", warm, 4)
        assert len({d.actual for d in decisions}) >= 2  # the stream spread
        facts = json.loads((out / f"ties-s{start}" / "learned-sglang-cache_aware.json").read_text())
        assert facts["worker_order"][0] in range(WORKERS)
        assert all((d.cause == "") == (d.predicted == d.actual) for d in decisions)
        assert sum(d.cause == "other" for d in decisions) <= 1, decisions


def test_in_flight_load_moves_kv_aware_and_the_twin_predicts_it(workers):
    """vllm-router's kv_aware weighs the requests in flight (0.1.17): waves of 4 requests of one
    group sent at once, each group's prefix placed on one worker beforehand. A long prefix (256
    tokens) keeps the whole wave on its worker; a short one (16) saves less than a few requests in
    flight cost, so the router sends part of the wave to the other workers. The twin
    (harness/routers/kv_cost.py) predicts every wave's workers; which request of a wave took
    which worker follows the order the requests reached the router (a miss of arrival order
    only). Two router starts, not one lucky start."""
    need_router("vllm")
    fleet, out = workers
    stream, warm = load_stream(WORKERS, KV_PREFIXES, KV_WIDTH)
    cfg = FleetConfig(replicas=WORKERS, router="kv_aware")
    for start in range(2):
        where = out / f"kv-load-s{start}"
        decisions = route_through("vllm", cfg, fleet, stream, where, warm, concurrency=KV_WIDTH)
        assert len(decisions) == len(stream)
        facts = json.loads((where / "learned-vllm-kv_aware.json").read_text())
        assert facts["order_source"] == "start log" and facts["first_pick_learned"] is True
        waves = sorted({d.wave for d in decisions})
        assert len(waves) == len(KV_PREFIXES)
        for wave, size in zip(waves, KV_PREFIXES):
            got = [d for d in decisions if d.wave == wave]
            placed = int(got[0].request_id[1]) % WORKERS  # group g was placed on worker g mod N
            actual = sorted(d.actual for d in got)
            assert sorted(d.predicted for d in got) == actual, (start, wave, got)
            if size == 256:  # the saving outweighs any load: the whole wave stays
                assert actual == [placed] * KV_WIDTH
            else:  # load moved part of the wave off the worker holding its prefix
                assert 1 <= actual.count(placed) < KV_WIDTH, (start, wave, got)
        misses = sum(d.predicted != d.actual for d in decisions)
        assert order_only(decisions) == misses  # every miss is arrival order within a wave
