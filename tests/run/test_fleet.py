"""The fleet: router decisions on hand-made streams, a fleet of one equal to the plain engine,
routed hit rates within the single-cache bounds, and bad fleet configs refused in one line."""

from __future__ import annotations

import pytest

from harness.client.inprocess import drive
from harness.fleet.approx_tree import ApproxTree, pack
from harness.fleet.config import FleetConfig
from harness.fleet.fleet import Fleet
from harness.fleet.policies import ROUTERS, CacheAware, ConsistentHash, FleetView, Routed
from harness.run.compose import compose
from harness.run.engine_target import ENGINE, build_target, engine_of
from harness.run.pipeline import prepare
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]


def stream(groups: int, per_group: int, prefix: int = 64, tail: int = 16) -> list[Routed]:
    """Requests of `groups` shared prefixes, interleaved g0 g1 g2 g0 g1 g2 ..."""
    out = []
    for i in range(per_group):
        for g in range(groups):
            prompt = [1000 * (g + 1) + k for k in range(prefix)] + [
                7 * i + g + k for k in range(tail)
            ]
            out.append(Routed(f"g{g}q{i}", prompt, session_id=f"s{g}"))
    return out


def route_all(router, reqs, replicas: int, finish: bool = True) -> list[int]:
    """Decisions for `reqs` in order; with `finish` each request ends before the next arrives."""
    view = FleetView([0] * replicas)
    out = []
    for req in reqs:
        i = router.choose(req, view)
        out.append(i)
        if not finish:
            view.loads[i] += 1
    return out


def test_registry_lists_the_valid_policies():
    assert ROUTERS.names() == sorted(
        [
            "round_robin",
            "random",
            "least_load",
            "power_of_two",
            "consistent_hash",
            "cache_aware",
            "kv_aware",
            "cached_now",
            "oracle",
            "oracle_capped",
            "dualmap",
            "dualmap_hot",
        ]
    )
    with pytest.raises(Exception, match="valid: cache_aware, cached_now, consistent_hash"):
        ROUTERS.get("nope")


def test_round_robin_random_least_load_power_of_two():
    cfg = FleetConfig(replicas=3, seed=5)
    reqs = stream(2, 6)
    assert route_all(ROUTERS.get("round_robin")(cfg), reqs, 3) == [0, 1, 2] * 4
    a = route_all(ROUTERS.get("random")(cfg), reqs, 3)
    assert a == route_all(ROUTERS.get("random")(cfg), reqs, 3)  # seeded
    assert a != route_all(ROUTERS.get("random")(FleetConfig(seed=6)), reqs, 3)
    assert set(a) == {0, 1, 2}
    # nothing finishes: least_load fills the replicas evenly, lowest index first
    assert route_all(ROUTERS.get("least_load")(cfg), reqs[:6], 3, finish=False) == [0, 1, 2] * 2
    p2 = route_all(ROUTERS.get("power_of_two")(cfg), reqs, 3, finish=False)
    assert max(p2.count(i) for i in range(3)) - min(p2.count(i) for i in range(3)) <= 2


def test_consistent_hash_is_sticky_and_stable_when_a_replica_joins():
    cfg = FleetConfig()
    keys = [Routed(f"r{i}", [i], session_id=f"session-{i}") for i in range(400)]
    four = route_all(ConsistentHash(cfg), keys, 4)
    assert four == route_all(ConsistentHash(cfg), keys, 4)  # a session always lands alike
    assert set(four) == {0, 1, 2, 3}
    five = route_all(ConsistentHash(cfg), keys, 5)
    moved = [(a, b) for a, b in zip(four, five) if a != b]
    assert all(b == 4 for _, b in moved)  # keys move only onto the new replica
    assert 0 < len(moved) < len(keys) * 0.4
    # without a session the prompt is the key: the same prompt, the same replica
    same = [Routed(f"x{i}", [1, 2, 3]) for i in range(5)]
    assert len(set(route_all(ConsistentHash(cfg), same, 4))) == 1


def test_cache_aware_groups_prefixes_then_balances_by_load():
    reqs = stream(3, 5)
    cfg = FleetConfig(replicas=3)
    got = route_all(CacheAware(cfg), reqs, 3)
    by_group = {r.request_id[:2]: set() for r in reqs}
    for r, i in zip(reqs, got):
        by_group[r.request_id[:2]].add(i)
    assert all(len(s) == 1 for s in by_group.values())  # each prefix keeps one worker
    assert len({min(s) for s in by_group.values()}) == 3  # new prefixes go to the smallest tree

    # one prefix only, nothing finishing: the tree sends all to one worker until the loads are
    # imbalanced (max - min > 2 and max > 1.5 x min), then the least loaded worker takes it
    one = stream(1, 8)
    bal = CacheAware(FleetConfig(replicas=2, balance_abs_threshold=2, balance_rel_threshold=1.5))
    assert route_all(bal, one, 2, finish=False) == [0, 0, 0, 1, 0, 1, 0, 1]
    # a match below cache_threshold goes to the smallest tree instead
    low = CacheAware(FleetConfig(replicas=2, cache_threshold=0.9))
    assert route_all(low, stream(1, 4, prefix=8, tail=16), 2) == [0, 1, 0, 1]


def test_approx_tree_match_insert_evict():
    tree = ApproxTree()
    tree.insert(pack([1, 2, 3, 4]), 0, 1.0)
    tree.insert(pack([1, 2, 9]), 1, 2.0)
    assert tree.match(pack([1, 2, 3, 4, 5]), 3.0) == (4, 0)
    assert tree.match(pack([1, 2, 7]), 3.0)[0] == 2
    assert tree.tenant_size == {0: 4, 1: 3}
    tree.insert(pack([5, 6, 7]), 0, 4.0)
    tree.evict(3)  # worker 0 holds 7 units: its least recent leaves go first
    assert tree.tenant_size[0] <= 3
    assert tree.match(pack([5, 6, 7]), 5.0) == (3, 0)


def _fleet_of(overrides: list[str], replicas: int, router: str):
    cfg = compose(merged(SMALL, SIM, overrides)).cfg
    cfg.fleet = FleetConfig(replicas=replicas, router=router)
    return cfg


def _records(engine, cfg, requests):
    return [
        (r.request_id, r.cached_tokens, r.arrival_s, r.first_token_s, r.finish_s)
        for r in sorted(drive(engine, requests, scripted=True), key=lambda r: r.request_id)
    ]


@pytest.mark.parametrize(
    "workload",
    [
        ["workload=multiturn", "workload.think_s=0.01"],
        [*SYSTEM_PROMPT_SMALL, "load.mode=poisson", "load.rate=40"],
    ],
)
def test_a_fleet_of_one_replays_the_plain_engine_exactly(workload):
    cfg = _fleet_of(workload, 1, "round_robin")
    prepared = prepare(cfg, ENGINE)
    requests = prepared.workload_requests
    plain = _records(engine_of(prepared), cfg, requests)
    one = build_target(cfg)
    assert not isinstance(one, Fleet)
    fleet = Fleet([one], cfg.fleet, virtual=True)
    assert _records(fleet, cfg, requests) == plain


def test_fleet_of_one_is_todays_run(tmp_path):
    base = merged(SMALL, SYSTEM_PROMPT_SMALL, SIM)
    today = run_harness(base, tmp_path / "a")
    one = run_harness(base + ["fleet.replicas=1"], tmp_path / "b")
    assert today.returncode == one.returncode == 0
    skip = {"date", "wall_s", "cache_bookkeeping_ms"}
    assert {k: v for k, v in today.summary.items() if k not in skip} == {
        k: v for k, v in one.summary.items() if k not in skip
    }


@pytest.mark.parametrize("router", ROUTERS.names())
def test_routed_fleet_stays_within_the_single_cache_bounds(router, tmp_path):
    over = ["workload.num_groups=4", "workload.prompts_per_group=4"]
    run = run_harness(
        merged(SMALL, SYSTEM_PROMPT_SMALL, SIM, over)
        + ["fleet.replicas=3", f"fleet.router={router}"],
        tmp_path / router,
    )
    assert run.returncode == 0, run.stderr
    s = run.summary
    assert s["fleet_replicas"] == 3 and len(s["fleet_per_replica"]) == 3
    assert sum(p["requests"] for p in s["fleet_per_replica"]) == s["completed"]
    assert 0 <= s["fleet_hit_rate"] <= s["ideal_hit_rate"] + 1e-12
    assert s["fleet_hit_rate"] == pytest.approx(s["hit_rate"])
    if router == "cache_aware":
        # the approximate tree learns from the routed prompts, so a burst is grouped too (kv_aware
        # reads the caches, empty while the whole burst is routed): only firsts miss
        assert s["fleet_hit_rate"] == pytest.approx(s["ideal_hit_rate"])


@pytest.mark.parametrize(
    "arg, needle",
    [
        ("fleet.replicas=0", "fleet.replicas must be an integer in [1, 1024]"),
        ("fleet.router=nearest", "unknown fleet router 'nearest'; valid: cache_aware"),
        ("fleet.cache_threshold=1.5", "fleet.cache_threshold must be a number in [0.0, 1.0]"),
        ("fleet.balance_rel_threshold=0.5", "fleet.balance_rel_threshold must be a number"),
        ("fleet.balance_abs_threshold=-1", "fleet.balance_abs_threshold must be an integer"),
        ("fleet.host_tier_weight=-0.5", "fleet.host_tier_weight must be a number in [0.0,"),
    ],
)
def test_bad_fleet_configs_are_one_line_exit_2(arg, needle, tmp_path):
    run = run_harness(merged(SMALL, SYSTEM_PROMPT_SMALL, SIM) + [arg], tmp_path / "run")
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == 2, run.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
