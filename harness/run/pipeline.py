"""One run of one configuration, the only place a run is prepared, measured and recorded.

    compose ▸ start (claim the run dir, manifest) ▸ prepare (requests, engine, warm-up, flush)
        ▸ measure (the client layer drives the target) ▸ finish (leak check, tables, summary)

The CLI (harness/run/execute.py), the claims (harness/claims/experiment.py) and the overhead tool
(harness/run/overhead.py) all call these functions; only this module warms up, flushes and drives a
measured run (a test enforces it). The cache-state protocol of benchmarking.md §4 is followed
and recorded: warm-up on unrelated tokens, a flush that must succeed, then the measured window
from an empty cache with the step and bookkeeping counters zeroed.
"""

from __future__ import annotations

import cProfile
import gc
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from engines.build import build_engine
from engines.cache.records import CacheIntegrityError
from engines.engine import Engine
from engines.records import RequestRecord
from harness.client.arrivals import resolve_mode, with_arrivals
from harness.client.inprocess import completion_request, drive
from harness.client.programs import runs_as_program
from harness.config.checks import check_known_keys, check_requests, check_run_config
from harness.config.schema import CONF_DIR, RunConfig
from harness.config.tokenspace import token_space_for
from harness.metrics.format import format_summary
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.summary import RunContext
from harness.metrics.table import itls_ms, request_row, request_table, token_rows
from harness.results.identity import claim_run_dir, fingerprint
from harness.results.manifest import VIRTUAL_DEVICE, build_manifest
from harness.results.rowlog import RowLog
from harness.results.run_dir import RunDir
from harness.results.safe_write import disk_fault
from workloads.base import TokenSpace, generate_with_notes
from workloads.bounds import run_bounds
from workloads.progress import progress
from workloads.request import Request
from workloads.tokens import warmup_requests

log = logging.getLogger(__name__)


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (a KeyboardInterrupt, so no `except Exception` swallows it)."""


@dataclass(frozen=True)
class Composed:
    """A checked configuration and its resolved form (what the manifest records)."""

    cfg: RunConfig
    resolved: dict


@dataclass
class RunOutcome:
    summary: dict
    run_dir: Path


@dataclass(frozen=True)
class Prepared:
    """A run ready to measure: its requests with arrival times, and a warmed-up, flushed engine."""

    workload_requests: list[Request]
    engine: Engine
    warm: dict  # warm-up facts and the workload's notes, both for the summary


@dataclass(frozen=True)
class Measured:
    """How the measured window ended, what it cost on this host, and the records the client
    received (in finish order; on an interrupt, exactly those delivered before it)."""

    status: str  # ok | interrupted | failed
    error: str | None
    wall_s: float
    cpu_s: float
    records: list[RequestRecord]


def compose(overrides: list[str], job_name: str = "harness") -> Composed:
    """The configuration `python -m harness OVERRIDES` would run, composed and checked."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name=job_name):
        return checked(hydra_compose(config_name="config", overrides=overrides))


def checked(dcfg: DictConfig) -> Composed:
    """A composed Hydra config as a checked RunConfig (unknown keys and bad values refused)."""
    return with_values_checked(dcfg, typed(dcfg))


def typed(dcfg: DictConfig) -> RunConfig:
    """The config as a RunConfig, unknown keys refused; its values are not checked yet."""
    check_known_keys(dcfg)
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, RunConfig)
    return cfg


def with_values_checked(dcfg: DictConfig, cfg: RunConfig) -> Composed:
    """`cfg` (typed from `dcfg`) with its values checked, beside its resolved form."""
    check_run_config(cfg)
    resolved = OmegaConf.to_container(dcfg, resolve=True)
    assert isinstance(resolved, dict)
    return Composed(cfg, resolved)


def identity(composed: Composed) -> dict[str, str]:
    """What the manifest records beside the config: the device as resolved, the fingerprint."""
    cfg = composed.cfg
    if cfg.executor == "real":
        from engines.build import resolve_device

        device = str(resolve_device(cfg.device))
    else:
        device = VIRTUAL_DEVICE
    return {"device": device, "config_fingerprint": fingerprint(composed.resolved)}


def start(run_dir: Path, overwrite: bool) -> tuple[RunDir, RowLog]:
    """Claim `run_dir` (never another run's results) and open its append-only rows file."""
    out = RunDir(Path(run_dir))
    return out, RowLog(claim_run_dir(out.path, RunDir.ROWS, overwrite))


def write_manifest(out: RunDir, composed: Composed) -> None:
    out.write_manifest(build_manifest(composed.resolved, composed.cfg.seed, identity(composed)))


def run(cfg: RunConfig, out: RunDir, rows: RowLog) -> RunOutcome:
    """Prepare, measure and record one run whose directory is claimed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        with collector_paused():
            prepared = prepare(cfg)
            gc.freeze()  # before the collector is back, which would walk them all once more
        return _measure_and_finish(cfg, out, rows, prepared)
    finally:
        gc.unfreeze()  # cycles among the set-up objects are found again from here on


def prepare(cfg: RunConfig) -> Prepared:
    """Generate the requests, build the engine, check every request fits, warm up and flush."""
    space = token_space_for(cfg.model)
    generated = generate_with_notes(cfg.workload, cfg.seed, space)
    workload_requests = with_arrivals(generated.requests, cfg.load, cfg.seed)
    check_requests(workload_requests, cfg.load)
    engine = build_engine(
        cfg.engine, cfg.model, executor=cfg.executor, device=cfg.device, hardware=cfg.hardware
    )
    _cap_torch_threads(cfg.threads)
    engine.check_fits([completion_request(r, scripted=False) for r in workload_requests])
    warm = {**warm_up_and_flush(engine, cfg, space), **generated.notes}
    return Prepared(workload_requests, engine, warm)


def measure(
    cfg: RunConfig,
    prepared: Prepared,
    on_finish: Callable[[RequestRecord], None] | None = None,
    profile: cProfile.Profile | None = None,
) -> Measured:
    """The measured window: the client layer sends the workload to the engine. An interrupt or
    a crash ends it early with the records received until then kept (`Measured.records`)."""
    status, error = "ok", None
    received: list[RequestRecord] = []

    def deliver(record: RequestRecord) -> None:
        received.append(record)
        if on_finish is not None:
            on_finish(record)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    try:
        drive(
            prepared.engine,
            prepared.workload_requests,
            scripted=cfg.decode == "scripted",
            max_concurrency=cfg.load.max_concurrency,
            on_finish=deliver,
            program_batch=runs_as_program(cfg.workload.name),
        )
    except (KeyboardInterrupt, RunInterrupted):
        status, error = "interrupted", "SIGINT/SIGTERM during the measured run"
    except Exception as exc:  # a crash mid-run: keep the finished rows, mark the run failed
        if not disk_fault(exc):  # a full or read-only disk is the machine's, not a bug: one line
            traceback.print_exc(file=sys.stderr)
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        if profile is not None:
            profile.disable()
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    return Measured(status, error, wall_s, cpu_s, received)


def _measure_and_finish(
    cfg: RunConfig, out: RunDir, rows: RowLog, prepared: Prepared
) -> RunOutcome:
    """The measured window with every finished row appended as it finishes, then the files."""
    by_id = {r.request_id: r for r in prepared.workload_requests}
    index_of = {rid: i for i, rid in enumerate(by_id)}
    ctx = asdict(_context(cfg, out.path))
    total = sum(r.n for r in prepared.workload_requests)
    bar = progress(None, f"{cfg.workload.name}/{cfg.engine.cache}", "req", total=total)

    def on_finish(record: RequestRecord) -> None:
        rows.append(request_row(record, by_id[record.parent_id], index_of[record.parent_id], ctx))
        bar.update(1)

    try:
        measured = measure(cfg, prepared, on_finish)
    finally:
        bar.close()
    with interrupts_deferred():  # what was measured is final now: write it whole
        return finish(Finished(cfg, out, rows, prepared, measured))


@dataclass(frozen=True)
class Finished:
    """Everything `finish` records: the run, its files and how its measured window ended."""

    cfg: RunConfig
    out: RunDir
    rows: RowLog
    prepared: Prepared
    measured: Measured


@contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while the run is set up. Expanding a whole trace makes ~10^5
    long-lived objects (requests, replies) that form no cycles, and each full collection
    meanwhile walked all of them again; frozen afterwards (`run`), they stay out of the
    collections in the measured loop and the bounds too. Time in the collector of a whole
    conversation-trace APC replay: ~0.9 s before, ~0.35 s after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cap_torch_threads(threads: int) -> None:
    """Cap torch's intra-op threads where a model runs (the real executor imported torch to build
    it). A simulated run never imports torch, ~2.5 s of a whole-trace replay here."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def _context(cfg: RunConfig, run_dir: Path) -> RunContext:
    return RunContext(
        workload=cfg.workload.name,
        workload_version=cfg.workload.version,
        engine=cfg.engine.cache,
        policy=cfg.engine.policy,
        block_size=cfg.engine.block_size,
        seed=cfg.seed,
        run_id=run_dir.name,
    )


def finish(run: Finished) -> RunOutcome:
    """Leak check, tables, summary and files of a run whose measured window has ended."""
    cfg, out, engine = run.cfg, run.out, run.prepared.engine
    status, error = run.measured.status, run.measured.error
    if status == "ok":
        status, error = _idle_check(engine)
    records = run.measured.records
    duration_s = max((r.finish_s for r in records), default=0.0)
    workload_requests = run.prepared.workload_requests
    by_id = {r.request_id: r for r in workload_requests}
    table = request_table(records, by_id, _context(cfg, out.path))
    out.write_requests(table)
    extra = _extras(run, status, error, table)
    summary = summary_dict(
        summarize(table, itls_ms(records), duration_s, extra, metrics=cfg.metrics)
    )
    if cfg.save_tokens:
        out.write_tokens(token_rows(table, records, by_id))
    if engine.loop.step_log is not None:
        out.write_steps(engine.loop.step_log)
    out.write_summary(summary)
    run.rows.close()
    out.remove(out.rows_path)  # the rows are in requests.parquet now
    # A header line takes the log prefix ([time][name][INFO] - ), so the table's lines all align.
    log.info("summary of %s:\n%s", out.path.name, format_summary(summary))
    return RunOutcome(summary, out.path)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM until the block ends: they arrive after the measured window, and the
    finished rows must reach disk whole rather than be lost to a second Ctrl-C. (Handlers, not a
    signal mask: any thread may take a process signal, but Python handlers run in the main one.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def warm_up_and_flush(engine: Engine, cfg: RunConfig, space: TokenSpace) -> dict:
    """Run unrelated requests, then flush; the flush must succeed (benchmarking.md §4). The
    step and bookkeeping counters start from zero for the measured window."""
    info: dict[str, object] = {"warmup_policy": "none", "warmup_requests": 0}
    if cfg.warmup.enabled and cfg.warmup.num_requests > 0:
        reqs = warmup_requests(
            space, cfg.seed, cfg.warmup.num_requests, cfg.warmup.prompt_len, cfg.warmup.output_len
        )
        drive(engine, reqs, scripted=True)
        engine.records.clear()
        info = {"warmup_policy": "unrelated", "warmup_requests": len(reqs)}
    flushed = engine.cache.reset()
    if not flushed:
        raise CacheIntegrityError(
            "the cache refused to flush after warm-up: a request still holds KV"
        )
    engine.loop.bookkeeping_ns = 0
    engine.loop.num_steps = 0
    info["cache_flushed"] = flushed
    return info


def _idle_check(engine: Engine) -> tuple[str, str | None]:
    """After the run every hold must be released and the accounting must balance."""
    try:
        engine.cache.check_integrity()
        usage = engine.cache.usage()
        if usage.protected:
            raise CacheIntegrityError(f"{usage.protected} KV tokens still held at idle")
    except CacheIntegrityError as exc:
        return "failed", f"cache leak check: {exc}"
    return "ok", None


@dataclass(frozen=True)
class RunFacts:
    """What the pipeline records beside the request table's figures (the summary's `facts`);
    the configuration itself is in manifest.json."""

    date: str
    backend: str  # vLLM's and SGLang's summaries name the backend and the model
    model_id: str
    workload: str
    seed: int
    num_prompts: int
    load_mode: str  # what `auto` resolved to
    max_concurrency: int | None  # vLLM's result field of the same name
    policy_profile: dict  # the knobs in effect, resolved
    bounds: dict  # ideal / LRU-capped / Belady hit rates (see `_bounds`)
    engine_requests: int
    engine_queries: int
    engine_hits: int
    evictions: int
    evicted_tokens: int
    cache_bookkeeping_ms: float
    num_steps: int
    wall_s: float
    clock: str  # wall | virtual: simulated durations and latencies are the cost model's time
    hardware: str | None
    status: str
    error: str | None
    warm: dict  # warm-up facts and the workload's notes

    def fields(self) -> dict[str, object]:
        """Flat, in summary.json's order: the bounds after the policy profile, warm-up last."""
        out = {k: v for k, v in vars(self).items() if k not in ("bounds", "warm")}
        head = list(out)[: list(out).index("policy_profile") + 1]
        flat = {k: out[k] for k in head} | self.bounds
        flat |= {k: v for k, v in out.items() if k not in head}
        return flat | self.warm


def _extras(run: Finished, status: str, error: str | None, table: object) -> dict[str, object]:
    cfg, engine, workload_requests = run.cfg, run.prepared.engine, run.prepared.workload_requests
    stats = engine.cache.stats()
    return RunFacts(
        date=time.strftime("%Y%m%d-%H%M%S"),
        backend=cfg.engine.cache,
        model_id=cfg.model.name,
        workload=cfg.workload.name,
        seed=cfg.seed,
        num_prompts=sum(r.n for r in workload_requests),
        load_mode=resolve_mode(workload_requests, cfg.load),
        max_concurrency=cfg.load.max_concurrency,
        policy_profile=_policy_profile(cfg, engine),
        bounds=_bounds(cfg, workload_requests),
        engine_requests=stats.requests,
        engine_queries=stats.queries,
        engine_hits=stats.hits,
        evictions=stats.num_evictions,
        evicted_tokens=stats.evicted_tokens,
        cache_bookkeeping_ms=engine.loop.bookkeeping_ns / 1e6,
        num_steps=engine.loop.num_steps,
        wall_s=run.measured.wall_s,
        clock="virtual" if cfg.executor == "simulated" else "wall",
        hardware=getattr(cfg.hardware, "name", None),
        status=status,
        error=error,
        warm=run.prepared.warm,
    ).fields()


def _policy_profile(cfg: RunConfig, engine: Engine) -> dict:
    """The chosen cache's and scheduler's knobs, with the values the scheduler resolved."""
    profile = cfg.engine.design_knobs()
    for name in ("reserve_full_prompt", "async_scheduling"):  # None: the free-order profile's
        if name in profile:
            profile[name] = getattr(engine.loop.scheduler, name)
    return profile


def _bounds(cfg: RunConfig, workload_requests: list[Request]) -> dict:
    """Ideal, LRU-capped and Belady hit rates from the token streams (see BoundsConfig)."""
    g = cfg.engine.block_size
    gs = set(cfg.bounds.granularities) | ({g} if cfg.bounds.include_engine_granularity else set())
    prompt_tokens = sum(len(r.prompt_ids) * r.n for r in workload_requests)
    skipped = (
        sorted(x for x in gs if x < 16) if prompt_tokens > cfg.bounds.max_fine_prompt_tokens else []
    )
    gs -= set(skipped)
    capped_g = g if cfg.bounds.capped and g in gs else None
    capacity_blocks = cfg.engine.kv_capacity_tokens // g
    found = run_bounds(workload_requests, sorted(gs), capped_g, capacity_blocks)
    ideal, lru, belady = found.ideal, found.capped.get("lru"), found.capped.get("belady")
    return {
        "ideal_hit_rate": ideal.get(g),
        "ideal_hit_rate_token": ideal.get(1),  # page 1: the same ceiling for every engine
        "theoretical_hit_rate_capped": lru,
        "belady_hit_rate": belady,
        "theoretical_hit_rate_by_granularity": {str(k): v for k, v in sorted(ideal.items())},
        "bounds_skipped": skipped,
    }
