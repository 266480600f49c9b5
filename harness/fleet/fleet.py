"""N whole engines behind a router, driven by the client loop like one engine.

    drive ─submit(req, t)─▶ Fleet ─router.choose─▶ replica i: Engine.submit   (load[i] += 1)
    drive ─step(next)────▶ Fleet ─▶ the busy replica whose clock is earliest steps once

Each replica keeps its own clock. Simulated, they are virtual clocks and the fleet is a discrete
event simulation: the next event is the earliest replica step or the next release, whichever
comes first, so every routing decision sees exactly the steps that started before it. Real, every
replica's wall clock reads the same time and busy replicas take turns (one process, one core).
`fleet.replicas=1` never builds a Fleet: the pipeline drives the plain engine (today's run).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from engines.cache.records import CacheStats, CacheUsage
from engines.engine import Engine, StepOutput
from engines.records import RequestRecord
from engines.request import CompletionRequest, GenerationRequest
from harness.fleet.config import FleetConfig
from harness.fleet.policies import PENDING, PRECISE, ROUTERS, FleetView, Routed


class FleetClock:
    """The fleet's event time: where the last event (a step start or a release) happened."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._now = 0.0

    def restart(self) -> None:
        self._now = 0.0
        for engine in self.fleet.replicas:
            engine.clock.restart()

    def now(self) -> float:
        if self.fleet.virtual:
            return self._now
        return self.fleet.replicas[0].clock.now()

    def wait_until(self, t_s: float) -> None:
        if self.fleet.virtual:
            self._now = max(self._now, t_s)
        else:
            self.fleet.replicas[0].clock.wait_until(t_s)

    def advance(self, dt_s: float) -> None:
        self._now += dt_s


class FleetCache:
    """The replicas' caches as one for the pipeline: summed stats and usage, flushed together
    (the router's memory too: a flushed fleet routes as a fresh one)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    @property
    def capacity_tokens(self) -> int:
        return sum(e.cache.capacity_tokens for e in self.fleet.replicas)

    def stats(self) -> CacheStats:
        total = CacheStats()
        for e in self.fleet.replicas:
            s = e.cache.stats()
            for f in dataclasses.fields(CacheStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(s, f.name))
        return total

    def usage(self) -> CacheUsage:
        parts = [e.cache.usage() for e in self.fleet.replicas]
        sums = {
            f.name: sum(getattr(u, f.name) for u in parts) for f in dataclasses.fields(CacheUsage)
        }
        return CacheUsage(**sums)

    def check_integrity(self) -> None:
        for e in self.fleet.replicas:
            e.cache.check_integrity()

    def reset(self) -> bool:
        flushed = all([e.cache.reset() for e in self.fleet.replicas])
        self.fleet.router.reset()
        self.fleet.assignment.clear()
        for p in self.fleet.pending:
            p.clear()
        return flushed


class FleetLoop:
    """The step-loop counters the pipeline reads, over all replicas."""

    step_log = None  # per-replica step logs are not merged

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        # the design's knobs (a mixed fleet's: its first replica's)
        self.scheduler = fleet.replicas[0].loop.scheduler

    @property
    def bookkeeping_ns(self) -> int:
        return sum(e.loop.bookkeeping_ns for e in self.fleet.replicas)

    @property
    def num_steps(self) -> int:
        return sum(e.loop.num_steps for e in self.fleet.replicas)


class Fleet:
    def __init__(self, replicas: list[Engine], cfg: FleetConfig, virtual: bool) -> None:
        self.replicas = replicas
        self.cfg = cfg
        self.virtual = virtual
        self.router = ROUTERS.get(cfg.router)(cfg)
        self.precise = cfg.router in PRECISE
        self.wants_pending = cfg.router in PENDING
        # per replica: the prompts of the parents in flight there (the online oracle reads them)
        self.pending: list[dict[str, Sequence[int]]] = [{} for _ in replicas]
        self.loads = [0] * len(replicas)  # parents in flight per replica (the router's count)
        self.assignment: dict[str, int] = {}  # parent id -> replica
        self.clock = FleetClock(self)
        self.cache = FleetCache(self)
        self.loop = FleetLoop(self)
        self.records: list[RequestRecord] = []
        self._turn = 0  # real executor: the replica that steps next
        self.sessions: dict[str, str | None] = {}  # request id -> session (consistent_hash's key)

    @property
    def frontend_records(self) -> list[RequestRecord]:
        return [r for e in self.replicas for r in e.frontend_records]

    @property
    def has_work(self) -> bool:
        return any(e.has_work for e in self.replicas)

    def check_fits(self, requests: list[GenerationRequest | CompletionRequest]) -> None:
        first_of_each = {e.cache.name: e for e in reversed(self.replicas)}  # a mixed fleet's
        for engine in first_of_each.values():
            engine.check_fits(requests)

    def idle(self) -> None:
        for e in self.replicas:
            if not e.has_work:
                e.idle()

    def reset_counters(self) -> None:
        for e in self.replicas:
            e.reset_counters()

    def restart(self) -> None:
        for e in self.replicas:
            e.restart()
        self.clock.restart()
        self.records = []

    def route(self, req: CompletionRequest) -> int:
        view = FleetView(
            list(self.loads),
            self.clock.now(),
            [e.cache for e in self.replicas] if self.precise else None,
            pending=[list(p.values()) for p in self.pending] if self.wants_pending else None,
            host_tiers=self.cfg.index_host_tier,
        )
        routed = Routed(
            req.request_id, req.prompt_ids, self.sessions.get(req.request_id), req.salt, req.lora_id
        )
        i = self.router.choose(routed, view)
        self.assignment[req.request_id] = i
        self.loads[i] += 1
        self.pending[i][req.request_id] = req.prompt_ids
        return i

    def submit(self, req: CompletionRequest, arrival_s: float) -> list[str]:
        engine = self.replicas[self.route(req)]
        engine.clock.wait_until(arrival_s)  # an idle replica's clock catches up with the release
        return engine.submit(req, arrival_s)

    def submit_batch(self, reqs: list[CompletionRequest], arrival_s: float) -> list[str]:
        """A program batch stays together (its precached common prefix is one replica's)."""
        i = self.route(reqs[0])
        for req in reqs[1:]:
            self.assignment[req.request_id] = i
            self.loads[i] += 1
            self.pending[i][req.request_id] = req.prompt_ids
        self.replicas[i].clock.wait_until(arrival_s)
        return self.replicas[i].submit_batch(reqs, arrival_s)

    def step(self, next_release_s: float = math.inf) -> StepOutput:
        busy = [i for i, e in enumerate(self.replicas) if e.has_work]
        if not busy:
            return StepOutput(self.clock.now(), False)
        if self.virtual:
            i = min(busy, key=lambda k: (self.replicas[k].clock.now(), k))
            start = self.replicas[i].clock.now()
            if start >= next_release_s:  # a release comes first: the driver routes it
                return StepOutput(self.clock.now(), False)
            self.clock.wait_until(start)
        else:
            i = next((k for k in busy if k >= self._turn), busy[0])
            self._turn = i + 1
        out = self.replicas[i].step(next_release_s)
        for parent in out.finished_parents:
            self.loads[self.assignment[parent]] -= 1
            self.pending[self.assignment[parent]].pop(parent, None)
        self.records.extend(out.finished)
        if not self.replicas[i].has_work:
            self.replicas[i].idle()
        return out  # end_s: when this replica's step ended (follow-up turns count from it)


def build_fleet(cfg: FleetConfig, build_one: Callable[[], Engine], virtual: bool) -> Fleet:
    """`cfg.replicas` engines from `build_one()` (each its own cache, scheduler and pool)."""
    return Fleet([build_one() for _ in range(cfg.replicas)], cfg, virtual)
