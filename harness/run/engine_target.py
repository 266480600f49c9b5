"""The built-in engine in this process as the target: build it, warm it up, flush its cache,
drive it with the client layer, and report its counters, bounds and leak check.

What is common to every target (the stages, the warm-up policy, the files, the summary's shape)
is the pipeline's (harness/run/pipeline.py); this module holds what only an engine in this
process has: its build, `Engine.step` driven by harness.client.inprocess, its cache statistics
and step log, and the hit-rate bounds computed at its block size.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict

from engines.build import build_engine
from engines.cache.records import CacheIntegrityError
from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import HostTier
from engines.config import EngineConfig
from engines.engine import Engine
from engines.host_link import CarriesHostLink
from engines.records import RequestRecord
from harness.client.inprocess import completion_request, drive
from harness.client.programs import runs_as_program
from harness.config.schema import RunConfig
from harness.config.tokenspace import token_space_for
from harness.fleet.facts import fleet_facts, with_replica
from harness.fleet.fleet import Fleet, build_fleet
from harness.fleet.mixed import replica_engines
from harness.fleet.tiers import (
    fleet_link_figures,
    fleet_storage_link_figures,
    fleet_storage_stats,
    fleet_tier_stats,
)
from harness.metrics.summary import RunContext
from harness.metrics.table import itls_ms, request_row, request_table, token_rows
from harness.results.run_dir import RunDir
from harness.run.pipeline import Prepared
from harness.run.target import Recorded
from workloads.bounds import ceiling_hit_rate, run_bounds
from workloads.request import Request


class EngineTarget:
    """The default target: no `server` (or other target group) is set."""

    def connect(self, cfg: RunConfig) -> EngineSession:
        return EngineSession(cfg)


class EngineSession:
    """One engine for one run; built in `admit`, once the requests are known."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.space = token_space_for(cfg.model)
        self.backend = cfg.engine.cache
        self.model_id = cfg.model.name
        self.block_size = cfg.engine.block_size
        self._engine: Engine | Fleet | None = None
        self._by_id: dict[str, Request] = {}

    @property
    def engine(self) -> Engine | Fleet:
        """The engine, or with fleet.replicas > 1 the fleet of engines (docs/fleet.md §1)."""
        assert self._engine is not None, "admit() builds the engine"
        return self._engine

    def admit(self, requests: list[Request]) -> None:
        """Build the engine and check that every request can ever fit in it."""
        self._engine = build_target(self.cfg)
        if isinstance(self._engine, Fleet):
            self._engine.sessions = {r.request_id: r.session_id for r in requests}
        _cap_torch_threads(self.cfg.threads)
        self.engine.check_fits([completion_request(r, scripted=False) for r in requests])
        self._by_id = {r.request_id: r for r in requests}

    def warm_up(self, requests: list[Request]) -> None:
        drive(self.engine, requests, scripted=True)
        self.engine.records.clear()

    def flush(self, warmup: list[Request]) -> dict[str, object]:
        """The flush must succeed (benchmarking.md §4); the counters start from zero after it."""
        flushed = self.engine.cache.reset()
        if not flushed:
            raise CacheIntegrityError(
                "the cache refused to flush after warm-up: a request still holds KV"
            )
        self.engine.reset_counters()
        return {"cache_flushed": flushed}

    def drive(self, requests: list[Request], deliver: Callable[[RequestRecord], None]) -> None:
        cfg = self.cfg
        drive(
            self.engine,
            requests,
            scripted=cfg.decode == "scripted",
            max_concurrency=cfg.load.max_concurrency,
            on_finish=deliver,
            program_batch=runs_as_program(cfg.workload.name),
        )

    def rows(
        self, item: RequestRecord, index_of: Mapping[str, int], context: dict[str, object]
    ) -> list[dict]:
        request = self._by_id[item.parent_id]
        return [request_row(item, request, index_of[item.parent_id], context)]

    def record(
        self,
        cfg: RunConfig,
        requests: list[Request],
        items: list[RequestRecord],
        context: RunContext,
    ) -> Recorded:
        engine = self.engine
        table = request_table(items, self._by_id, context)
        if isinstance(engine, Fleet):
            table = with_replica(table, engine.assignment)
        status, error = _idle_check(engine)
        stats = engine.cache.stats()
        figures: dict[str, object] = {
            "policy_profile": _policy_profile(cfg, engine),
            **_bounds(cfg, requests),
            "engine_requests": stats.requests,
            "engine_queries": stats.queries,
            "engine_hits": stats.hits,
            "evictions": stats.num_evictions,
            "evicted_tokens": stats.evicted_tokens,
            "cache_bookkeeping_ms": engine.loop.bookkeeping_ns / 1e6,
            "num_steps": engine.loop.num_steps,
        }
        if isinstance(engine.cache, HostTier):  # tokens looked up, hit, stored, loaded, evicted
            figures["host_tier"] = asdict(engine.cache.host_stats())
            link = engine.executor if isinstance(engine, Engine) else None
            if isinstance(link, CarriesHostLink) and link.host_link is not None:  # bytes, time
                figures["host_link"] = asdict(link.host_link.figures())
                if link.host_link.storage is not None:  # a storage tier's reads and writes
                    figures["storage_link"] = asdict(link.host_link.storage.figures())
        if isinstance(engine.cache, StorageTier):  # asked, promoted, written, read back
            figures["storage_tier"] = asdict(engine.cache.storage_stats())
        if isinstance(engine, Fleet):
            figures |= _fleet_tier_figures(engine)
            block = getattr(cfg.workload, "block_size", None)  # a trace's own (Mooncake: 512)
            prompts = [r.prompt_ids for r in requests for _ in range(r.n)]
            tiers = (cfg.engine.host_tier.enabled, cfg.engine.storage_tier.enabled)
            figures |= fleet_facts(table, cfg.fleet, block, prompts, *tiers)
        clock: dict[str, object] = {
            # simulated durations and latencies are the cost model's time
            "clock": "virtual" if cfg.executor == "simulated" else "wall",
            "hardware": cfg.hardware.name if cfg.hardware is not None else None,
        }
        return Recorded(
            table=table,
            summarized=table,
            itls_ms=itls_ms(items),
            duration_s=max((r.finish_s for r in items), default=0.0),
            num_failed=0,
            token_rows=lambda: token_rows(table, items, self._by_id),
            status=status,
            error=error,
            figures=figures,
            clock=clock,
        )

    def write_files(self, out: RunDir) -> None:
        if self.engine.loop.step_log is not None:
            out.write_steps(self.engine.loop.step_log)

    def close(self) -> None:
        pass  # the engine is garbage once the run's objects go


def _cap_torch_threads(threads: int) -> None:
    """Cap torch's intra-op threads where a model runs (the real executor imported torch to build
    it). A simulated run never imports torch, ~2.5 s of a whole-trace replay here."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def build_target(cfg: RunConfig) -> Engine | Fleet:
    """One engine, or with fleet.replicas > 1 a fleet of whole engines behind a router."""

    def build_one(engine: EngineConfig = cfg.engine) -> Engine:
        return build_engine(
            engine, cfg.model, executor=cfg.executor, device=cfg.device, hardware=cfg.hardware
        )

    if cfg.fleet.replicas == 1:
        return build_one()
    virtual = cfg.executor == "simulated"
    mixed = replica_engines(cfg.engine, cfg.fleet)  # fleet.designs: each replica's own config
    if mixed is not None:
        return Fleet([build_one(e) for e in mixed], cfg.fleet, virtual)
    return build_fleet(cfg.fleet, build_one, virtual=virtual)


def _fleet_tier_figures(fleet: Fleet) -> dict[str, object]:
    """A fleet with a host tier per replica: the replicas' tier counters and links summed, under
    the names a one-engine run uses (nothing without a tier)."""
    out: dict[str, object] = {}
    stats = fleet_tier_stats(fleet.replicas)
    if stats is not None:
        out["host_tier"] = asdict(stats)
        link = fleet_link_figures(fleet.replicas)
        if link is not None:
            out["host_link"] = asdict(link)
    storage = fleet_storage_stats(fleet.replicas)
    if storage is not None:
        out["storage_tier"] = asdict(storage)
        storage_link = fleet_storage_link_figures(fleet.replicas)
        if storage_link is not None:
            out["storage_link"] = asdict(storage_link)
    return out


def _idle_check(engine: Engine | Fleet) -> tuple[str, str | None]:
    """After the run every hold must be released and the accounting must balance."""
    try:
        engine.cache.check_integrity()
        usage = engine.cache.usage()
        if usage.protected:
            raise CacheIntegrityError(f"{usage.protected} KV tokens still held at idle")
    except CacheIntegrityError as exc:
        return "failed", f"cache leak check: {exc}"
    return "ok", None


def _policy_profile(cfg: RunConfig, engine: Engine | Fleet) -> dict:
    """The chosen cache's and scheduler's knobs, with the values the scheduler resolved."""
    profile = cfg.engine.design_knobs()
    for name in ("reserve_full_prompt", "async_scheduling"):  # None: the free-order profile's
        if name in profile:
            # a mixed fleet's first replica may run another scheduler: the config's value then
            profile[name] = getattr(engine.loop.scheduler, name, profile[name])
    return profile


def _bounds(cfg: RunConfig, workload_requests: list[Request]) -> dict:
    """Ideal, LRU-capped and Belady hit rates from the token streams (see BoundsConfig); with a
    host tier, LRU and Belady also at device + host capacity: one cache of both tiers' tokens that
    loads for free, which no two-tier cache of those sizes can beat (Belady) (docs/tiers.md §8)."""
    g = cfg.engine.block_size
    gs = set(cfg.bounds.granularities) | ({g} if cfg.bounds.include_engine_granularity else set())
    prompt_tokens = sum(len(r.prompt_ids) * r.n for r in workload_requests)
    skipped = (
        sorted(x for x in gs if x < 16) if prompt_tokens > cfg.bounds.max_fine_prompt_tokens else []
    )
    gs -= set(skipped)
    capped_g = g if cfg.bounds.capped and g in gs else None
    # A fleet is compared with one cache of its whole capacity (docs/fleet.md §1).
    capacity_blocks = cfg.engine.kv_capacity_tokens * cfg.fleet.replicas // g
    fleet = cfg.fleet.replicas > 1
    at = g if fleet and g in gs else None
    found = run_bounds(
        workload_requests, sorted(gs), capped_g, capacity_blocks, ceiling_granularity=at
    )
    ideal, lru, belady = found.ideal, found.capped.get("lru"), found.capped.get("belady")
    # A fleet's bound (docs/fleet.md §4): what no router can beat, in any order, at any capacity
    extra = {}
    if fleet:
        ceiling = found.ceiling if at is not None else ceiling_hit_rate(workload_requests, g)
        extra["fleet_bound_hit_rate"] = ceiling
    tier = cfg.engine.host_tier
    if tier.enabled and capped_g is not None:  # the same references at device + host capacity
        total_blocks = (cfg.engine.kv_capacity_tokens + tier.tokens) * cfg.fleet.replicas // g
        both = run_bounds(workload_requests, [g], g, total_blocks).capped
        extra["theoretical_hit_rate_capped_device_host"] = both.get("lru")
        extra["belady_hit_rate_device_host"] = both.get("belady")
    return {
        **extra,
        "ideal_hit_rate": ideal.get(g),
        "ideal_hit_rate_token": ideal.get(1),  # page 1: the same ceiling for every engine
        "theoretical_hit_rate_capped": lru,
        "belady_hit_rate": belady,
        "theoretical_hit_rate_by_granularity": {str(k): v for k, v in sorted(ideal.items())},
        "bounds_skipped": skipped,
    }


ENGINE = EngineTarget()


def engine_of(prepared: Prepared[RequestRecord]) -> Engine:
    """The engine of a run prepared on this target (the overhead tool and claim 7 read it)."""
    session = prepared.session
    assert isinstance(session, EngineSession), "a run prepared on the in-process engine"
    engine = session.engine
    assert isinstance(engine, Engine), "one engine (fleet.replicas=1)"
    return engine
