"""A third cache design, added by a test alone, runs where the harness asks capabilities.

tests/exact_design.py is a trivial exact-match block cache registered only inside these tests. It
declares `PrefixPeek` and `KvEventSource` (engines/cache/protocol.py), so without a line of
harness/ naming it: a simulated `kv_aware` fleet routes on its probe, and the step-locked twin
replays a run on that run's own KV events (its anchors from the design's own event hashes).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engines.build import build_engine
from engines.cache import DESIGNS, designs_with
from engines.cache.protocol import KvEventSource, PrefixPeek
from engines.config import EngineConfig
from engines.engine import Engine
from harness.client.inprocess import completion_request
from harness.live_server import steplock
from harness.live_server.kv_events import KvBatch
from harness.live_server.twin import _Context, twin_hardware
from tests.exact_design import NAME, registered
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness
from workloads.request import Request

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]
SPACED = ["workload.num_groups=4", "workload.prompts_per_group=4", "load.mode=poisson"]


@pytest.fixture
def exact():
    with registered() as design:
        yield design


def test_the_design_declares_the_capabilities_the_harness_asks(exact):
    assert exact.offers(PrefixPeek) and exact.offers(KvEventSource)
    assert NAME in designs_with(KvEventSource) and NAME in designs_with(PrefixPeek)
    assert DESIGNS.get(NAME) is exact


def test_a_kv_aware_fleet_routes_on_its_probe(exact, tmp_path):
    """Spaced arrivals: a routed request finds its group's prefix cached on one replica, so the
    fleet reaches the single-cache bound, as the shipped design does on the same stream."""
    base = merged(SMALL, SYSTEM_PROMPT_SMALL, SIM, [*SPACED, "load.rate=20"])
    fleet = ["fleet.replicas=3", "fleet.router=kv_aware"]
    own = run_harness([*base, f"engine.cache={NAME}", *fleet], tmp_path / NAME)
    assert own.returncode == 0, own.stderr
    s = own.summary
    assert s["completed"] == 16 and len(s["fleet_per_replica"]) == 3
    assert s["ideal_hit_rate"] > 0 and s["fleet_hit_rate"] == pytest.approx(s["ideal_hit_rate"])
    shipped = run_harness([*base, *fleet], tmp_path / "shipped").summary
    assert s["fleet_hit_rate"] == shipped["fleet_hit_rate"]
    assert [p["requests"] for p in s["fleet_per_replica"]] == [
        p["requests"] for p in shipped["fleet_per_replica"]
    ]


def _engine(cfg: EngineConfig) -> Engine:
    return build_engine(cfg, _Context(4096), executor="simulated", hardware=twin_hardware(None))


def _requests() -> list[tuple[int, Request]]:
    """(the step it is sent before, request): a wave, a second one on the same three prefixes
    while the first decodes, and a third on new prefixes. Room for all at once (KV and sequence
    slots): a finish shows in no event, so the twin may enter a wave before the server's running
    requests finished, which only admission limits or eviction order could tell apart."""
    rng = np.random.default_rng(7)
    prefixes = [tuple(int(t) for t in rng.integers(5, 900, 48)) for _ in range(6)]
    out = []
    for wave, (step, shared) in enumerate(
        ((0, prefixes[:3]), (4, prefixes[:3]), (40, prefixes[3:]))
    ):
        for g, prefix in enumerate(shared):
            tail = tuple(int(t) for t in rng.integers(5, 900, 20))
            script = tuple(int(t) for t in rng.integers(5, 900, 20))
            out.append((step, Request(f"w{wave}g{g}", prefix + tail, script)))
    return out


def _served(cfg: EngineConfig) -> tuple[list[steplock.Arrival], list[KvBatch], dict[str, int]]:
    """A run of the design standing in for a server: what was sent when, its KV-event batches
    (one per step that changed its cache, at the step's end) and each request's cached tokens."""
    engine = _engine(cfg)
    engine.restart()
    steplock.record_events(engine)
    sends = _requests()
    sent: dict[str, float] = {}
    ended: dict[str, float] = {}
    batches: list[KvBatch] = []
    step = 0
    while len(ended) < len(sends):
        for at, req in sends:
            if at == step:
                sent[req.request_id] = engine.clock.now()
                engine.submit(completion_request(req, True), engine.clock.now())
        if engine.has_work:
            engine.step()
        step += 1
        got = steplock.take_batch(engine, len(batches))
        if got is not None:
            batches.append(dataclasses.replace(got, ts=engine.clock.now()))
        for rec in engine.records:
            ended.setdefault(rec.parent_id, engine.clock.now())
    cached = {r.request_id: r.cached_tokens for r in engine.records}
    arrivals = [steplock.Arrival(r, sent[r.request_id], ended[r.request_id]) for _, r in sends]
    return arrivals, batches, cached


def test_the_step_locked_twin_replays_its_own_events(exact):
    cfg = EngineConfig(
        cache=NAME, block_size=16, kv_capacity_tokens=2048, decode_runs=False, max_num_seqs=16
    )
    cfg.validate()
    arrivals, batches, cached = _served(cfg)
    assert len(batches) >= 4 and not any(b.removed for b in batches)
    assert sum(cached.values()) > 0  # the second wave hit the first's prefixes
    run = steplock.replay(_engine(cfg), arrivals, batches, cfg.block_size)
    comparison = steplock.compare(batches, run.twin_batches)
    assert comparison["identical"], comparison["first_difference"]
    assert run.anchored == len(arrivals)
    assert {r.request_id: r.cached_tokens for r in run.records} == cached
