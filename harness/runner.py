"""One benchmark run: generate requests, warm up, flush, measure, check, write results.

    workload ─▶ arrivals ─▶ fan-out ─▶ Engine (warm-up ▸ flush ▸ measured run) ─▶ rows ─▶ files

The cache-state protocol of benchmarking.md §4 is followed and recorded: warm-up on unrelated
tokens, a flush that must succeed, then the measured window from an empty cache.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from engines.build import build_engine
from engines.cache.base import CacheIntegrityError
from engines.engine import Engine
from engines.request import GenerationRequest
from harness.checks import check_requests
from harness.config import RunConfig
from harness.load import fan_out, resolve_mode, with_arrivals
from harness.metrics import (
    RunContext,
    format_summary,
    itls_ms,
    request_row,
    request_table,
    summarize,
    token_rows,
)
from harness.results import RunDir
from harness.rowlog import RowLog
from harness.tokenspace import token_space_for
from workloads.base import generate_with_notes
from workloads.bounds import run_bounds
from workloads.progress import progress
from workloads.request import Request
from workloads.tokens import warmup_requests

log = logging.getLogger(__name__)


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (a KeyboardInterrupt, so no `except Exception` swallows it)."""


@dataclass
class RunOutcome:
    summary: dict
    run_dir: Path


@dataclass(frozen=True)
class _SetUp:
    """A run ready to measure: its requests, fanned out, and a warmed-up, flushed engine."""

    workload_requests: list[Request]
    gen_requests: list[GenerationRequest]
    engine: Engine
    warm: dict  # warm-up facts and the workload's notes, both for the summary


def run(cfg: RunConfig, out: RunDir, rows: RowLog) -> RunOutcome:
    """Measure one run whose directory is claimed (`rows` is its append-only rows file)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        with collector_paused():
            setup = _set_up(cfg)
            gc.freeze()  # before the collector is back, which would walk them all once more
        return _measure(cfg, out, rows, setup)
    finally:
        gc.unfreeze()  # cycles among the set-up objects are found again from here on


def _set_up(cfg: RunConfig) -> _SetUp:
    space = token_space_for(cfg.model)
    generated = generate_with_notes(cfg.workload, cfg.seed, space)
    workload_requests = with_arrivals(generated.requests, cfg.load, cfg.seed)
    check_requests(workload_requests, cfg.load)
    gen_requests = fan_out(workload_requests, scripted=cfg.decode == "scripted")
    engine = build_engine(
        cfg.engine, cfg.model, executor=cfg.executor, device=cfg.device, hardware=cfg.hardware
    )
    _cap_torch_threads(cfg.threads)
    engine.check_fits(gen_requests)
    warm = {**_warm_up(engine, cfg, space), **generated.notes}
    return _SetUp(workload_requests, gen_requests, engine, warm)


def _measure(cfg: RunConfig, out: RunDir, rows: RowLog, setup: _SetUp) -> RunOutcome:
    """The measured window, then the files (summary and tables)."""
    engine, workload_requests = setup.engine, setup.workload_requests
    by_id = {r.request_id: r for r in workload_requests}
    index_of = {rid: i for i, rid in enumerate(by_id)}
    ctx = asdict(_context(cfg, out.path))

    def on_finish(record) -> None:
        rows.append(request_row(record, by_id[record.parent_id], index_of[record.parent_id], ctx))
        bar.update(1)

    t_start = time.perf_counter()
    status, error = "ok", None
    total = len(setup.gen_requests)
    bar = progress(None, f"{cfg.workload.name}/{cfg.engine.cache}", "req", total=total)
    try:
        engine.run(
            setup.gen_requests, on_finish=on_finish, max_concurrency=cfg.load.max_concurrency
        )
    except (KeyboardInterrupt, RunInterrupted):
        status, error = "interrupted", "SIGINT/SIGTERM during the measured run"
    except Exception as exc:  # a crash mid-run: keep the finished rows, mark the run failed
        traceback.print_exc(file=sys.stderr)
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        bar.close()
    with interrupts_deferred():  # what was measured is final now: write it whole
        wall_s = time.perf_counter() - t_start
        return _finish(cfg, out, rows, engine, workload_requests, setup.warm, status, error, wall_s)


@contextmanager
def collector_paused():
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


def _finish(cfg, out, rows, engine, workload_requests, warm, status, error, wall_s) -> RunOutcome:
    """Leak check, tables, summary and files of a run whose measured window has ended."""
    if status == "ok":
        status, error = _idle_check(engine)
    records = engine.records
    duration_s = max((r.finish_s for r in records), default=0.0)
    by_id = {r.request_id: r for r in workload_requests}
    table = request_table(records, by_id, _context(cfg, out.path))
    out.write_requests(table)
    extra = _extras(cfg, engine, workload_requests, warm, status, error, wall_s, table)
    summary = summarize(table, itls_ms(records), duration_s, extra, metrics=cfg.metrics)
    if cfg.save_tokens:
        out.write_tokens(token_rows(table, records, by_id))
    out.write_summary(summary)
    rows.close()
    out.remove(out.rows_path)  # the rows are in requests.parquet now
    log.info("%s", format_summary(summary))
    return RunOutcome(summary, out.path)


@contextmanager
def interrupts_deferred():
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


def _warm_up(engine: Engine, cfg: RunConfig, space) -> dict:
    """Run unrelated requests, then flush; the flush must succeed (benchmarking.md §4)."""
    info = {"warmup_policy": "none", "warmup_requests": 0}
    if cfg.warmup.enabled and cfg.warmup.num_requests > 0:
        reqs = warmup_requests(
            space, cfg.seed, cfg.warmup.num_requests, cfg.warmup.prompt_len, cfg.warmup.output_len
        )
        engine.run(fan_out(reqs, scripted=True))
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


def _extras(cfg, engine, workload_requests, warm, status, error, wall_s, table) -> dict:
    """Measurements beside the request table's; the configuration is in manifest.json."""
    stats = engine.cache.stats()
    return {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "backend": cfg.engine.cache,  # vLLM's and SGLang's summary name the backend and model
        "model_id": cfg.model.name,
        "workload": cfg.workload.name,
        "seed": cfg.seed,
        "num_prompts": sum(r.n for r in workload_requests),
        "load_mode": resolve_mode(workload_requests, cfg.load),  # what `auto` resolved to
        "max_concurrency": cfg.load.max_concurrency,  # vLLM's result field of the same name
        "policy_profile": _policy_profile(cfg, engine),  # the knobs in effect, resolved
        **_bounds(cfg, workload_requests),
        "engine_requests": stats.requests,
        "engine_queries": stats.queries,
        "engine_hits": stats.hits,
        "evictions": stats.num_evictions,
        "evicted_tokens": stats.evicted_tokens,
        "cache_bookkeeping_ms": engine.loop.bookkeeping_ns / 1e6,
        "num_steps": engine.loop.num_steps,
        "wall_s": wall_s,
        "status": status,
        "error": error,
        **warm,
    }


def _policy_profile(cfg: RunConfig, engine: Engine) -> dict:
    """The chosen cache's and scheduler's knobs, with the values the scheduler resolved."""
    profile = cfg.engine.design_knobs()
    for name in ("reserve_full_prompt", "async_scheduling"):  # None: the free-order profile's
        if name in profile:
            profile[name] = getattr(engine.loop.admission, name)
    return profile


def _bounds(cfg: RunConfig, workload_requests) -> dict:
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
        "theoretical_hit_rate_capped": lru,
        "belady_hit_rate": belady,
        "theoretical_hit_rate_by_granularity": {str(k): v for k, v in sorted(ideal.items())},
        "bounds_skipped": skipped,
    }
