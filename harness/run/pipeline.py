"""One run of one configuration against one target, the only place a run is staged and recorded.

    start (claim the run dir, manifest: harness/run/compose.py) ▸ prepare (connect the target,
    requests, warm-up, flush) ▸ measure (the target's measured window) ▸ finish (its table and
    facts, the summary, the files)

Every target (harness/run/targets.py: the engine in this process, a live server) goes through
these stages; a target supplies only its parts (harness/run/target.py `Session`). The CLI
(harness/run/execute.py), the claims (harness/claims/experiment.py) and the overhead tool
(harness/run/overhead.py) all call them. The cache-state protocol of benchmarking.md §4 is
followed and recorded: warm-up on unrelated tokens, a flush that must succeed, then the measured
window from an empty cache with the target's counters zeroed.
"""

from __future__ import annotations

import cProfile
import gc
import json
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
from typing import Any, Generic

from harness.client.arrivals import resolve_mode, with_arrivals
from harness.config.checks import check_requests
from harness.config.schema import RunConfig
from harness.metrics.format import format_summary
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.summary import RunContext
from harness.results.rowlog import RowLog
from harness.results.run_dir import RunDir
from harness.run.faults import outside_fault
from harness.run.target import D, Recorded, Session, Target
from workloads.base import generate_with_notes
from workloads.progress import progress
from workloads.request import Request
from workloads.tokens import TokenSpace, warmup_requests

log = logging.getLogger(__name__)


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived (a KeyboardInterrupt, so no `except Exception` swallows it)."""


@dataclass
class RunOutcome:
    summary: dict
    run_dir: Path


@dataclass(frozen=True)
class Prepared(Generic[D]):
    """A run ready to measure: its requests with arrival times, and a connected, warmed-up,
    flushed target."""

    workload_requests: list[Request]
    session: Session[D]
    warm: dict  # warm-up facts and the workload's notes, both for the summary


@dataclass(frozen=True)
class Measured(Generic[D]):
    """How the measured window ended, what it cost on this host, and what the target delivered
    (in finish order; on an interrupt, exactly what was delivered before it)."""

    status: str  # ok | interrupted | failed
    error: str | None
    wall_s: float
    cpu_s: float
    items: list[D]


def run(cfg: RunConfig, out: RunDir, rows: RowLog, target: Target[Any]) -> RunOutcome:
    """Prepare, measure and record one run whose directory is claimed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        with collector_paused():
            prepared = prepare(cfg, target)
            gc.freeze()  # before the collector is back, which would walk them all once more
        try:
            return _measure_and_finish(cfg, out, rows, prepared)
        finally:
            prepared.session.close()
    finally:
        gc.unfreeze()  # cycles among the set-up objects are found again from here on


def workload_of(cfg: RunConfig, space: TokenSpace) -> list[Request]:
    """The requests a run of `cfg` generates, before arrivals: for a caller that designs runs
    from them (harness.advise), through the pipeline's own generation stage."""
    return generate_with_notes(cfg.workload, cfg.seed, space).requests


def prepare(cfg: RunConfig, target: Target[D]) -> Prepared[D]:
    """Connect the target, generate the requests, let the target admit them, warm up, flush."""
    session = target.connect(cfg)  # first: an unreachable server fails at once
    try:
        generated = generate_with_notes(cfg.workload, cfg.seed, session.space)
        workload_requests = with_arrivals(generated.requests, cfg.load, cfg.seed)
        check_requests(workload_requests, cfg.load)
        session.admit(workload_requests)
        warm = {**warm_up_and_flush(session, cfg), **generated.notes}
    except BaseException:
        session.close()
        raise
    return Prepared(workload_requests, session, warm)


def warm_up_and_flush(session: Session[Any], cfg: RunConfig) -> dict[str, object]:
    """The warm-up policy: unrelated requests (never a prefix of the workload's), then a flush
    that must succeed (benchmarking.md §4); the facts of both, for the summary."""
    info: dict[str, object] = {"warmup_policy": "none", "warmup_requests": 0}
    warm: list[Request] = []
    if cfg.warmup.enabled and cfg.warmup.num_requests > 0:
        warm = warmup_requests(
            session.space,
            cfg.seed,
            cfg.warmup.num_requests,
            cfg.warmup.prompt_len,
            cfg.warmup.output_len,
        )
        session.warm_up(warm)
        info = {"warmup_policy": "unrelated", "warmup_requests": len(warm)}
    return {**info, **session.flush(warm)}


def measure(
    cfg: RunConfig,
    prepared: Prepared[D],
    on_finish: Callable[[D], None] | None = None,
    profile: cProfile.Profile | None = None,
) -> Measured[D]:
    """The measured window: the target is driven with the workload. An interrupt or a crash
    ends it early with what was delivered until then kept (`Measured.items`)."""
    status, error = "ok", None
    received: list[D] = []

    def deliver(item: D) -> None:
        received.append(item)
        if on_finish is not None:
            on_finish(item)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    try:
        prepared.session.drive(prepared.workload_requests, deliver)
    except (KeyboardInterrupt, RunInterrupted):
        status, error = "interrupted", "SIGINT/SIGTERM during the measured run"
    except Exception as exc:  # a crash mid-run: keep the finished rows, mark the run failed
        if not outside_fault(exc):  # a full disk, a target's process killed: not a bug, one line
            traceback.print_exc(file=sys.stderr)
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        if profile is not None:
            profile.disable()
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    return Measured(status, error, wall_s, cpu_s, received)


def _measure_and_finish(
    cfg: RunConfig, out: RunDir, rows: RowLog, prepared: Prepared[D]
) -> RunOutcome:
    """The measured window with every finished row appended as it finishes, then the files."""
    session = prepared.session
    index_of = {r.request_id: i for i, r in enumerate(prepared.workload_requests)}
    ctx = asdict(_context(cfg, session, out.path))
    total = sum(r.n for r in prepared.workload_requests)
    bar = progress(None, f"{cfg.workload.name}/{session.backend}", "req", total=total)

    def on_finish(item: D) -> None:
        finished = session.rows(item, index_of, ctx)
        for row in finished:
            rows.append(row)
        bar.update(len(finished))

    try:
        measured = measure(cfg, prepared, on_finish)
    finally:
        bar.close()
    with interrupts_deferred():  # what was measured is final now: write it whole
        return finish(Finished(cfg, out, rows, prepared, measured))


@dataclass(frozen=True)
class Finished(Generic[D]):
    """Everything `finish` records: the run, its files and how its measured window ended."""

    cfg: RunConfig
    out: RunDir
    rows: RowLog
    prepared: Prepared[D]
    measured: Measured[D]


def finish(run: Finished[Any]) -> RunOutcome:
    """The target's table and facts, the summary and the files of a run whose measured window
    has ended."""
    cfg, out, session = run.cfg, run.out, run.prepared.session
    requests = run.prepared.workload_requests
    context = _context(cfg, session, out.path)
    recorded = session.record(cfg, requests, run.measured.items, context)
    status, error = run.measured.status, run.measured.error
    if status == "ok":  # the target's own check: a cache leak, replies that never came
        status, error = recorded.status, recorded.error
    out.write_requests(recorded.table)
    facts = RunFacts(
        date=time.strftime("%Y%m%d-%H%M%S"),
        backend=session.backend,
        model_id=session.model_id,
        workload=cfg.workload.name,
        seed=cfg.seed,
        num_prompts=sum(r.n for r in requests),
        load_mode=resolve_mode(requests, cfg.load),
        max_concurrency=cfg.load.max_concurrency,
        wall_s=run.measured.wall_s,
        status=status,
        error=error,
        warm=run.prepared.warm,
    )
    summary = summary_dict(
        summarize(
            recorded.summarized,
            recorded.itls_ms,
            recorded.duration_s,
            facts.fields(recorded),
            metrics=cfg.metrics,
            num_failed=recorded.num_failed,
        )
    )
    if cfg.save_tokens:
        out.write_tokens(recorded.token_rows())
    session.write_files(out)
    if recorded.manifest:
        _add_to_manifest(out, recorded.manifest)
    out.write_summary(summary)
    run.rows.close()
    out.remove(out.rows_path)  # the rows are in requests.parquet now
    # A header line takes the log prefix ([time][name][INFO] - ), so the table's lines all align.
    log.info("summary of %s:\n%s", out.path.name, format_summary(summary))
    return RunOutcome(summary, out.path)


@dataclass(frozen=True)
class RunFacts:
    """What the pipeline records beside the request table's figures for every target (the
    configuration itself is in manifest.json); the target's own facts go between them."""

    date: str
    backend: str  # vLLM's and SGLang's summaries name the backend and the model
    model_id: str
    workload: str
    seed: int
    num_prompts: int
    load_mode: str  # what `auto` resolved to
    max_concurrency: int | None  # vLLM's result field of the same name
    wall_s: float  # the measured window on this host's clock
    status: str
    error: str | None
    warm: dict  # warm-up facts and the workload's notes

    def fields(self, recorded: Recorded) -> dict[str, object]:
        """Flat, in summary.json's order: the head, the target's figures, wall_s, the target's
        clock, status, the warm-up facts, then what the target compares the run with."""
        head = {k: v for k, v in vars(self).items() if k not in ("wall_s", "status", "error")}
        del head["warm"]
        return (
            head
            | recorded.figures
            | {"wall_s": self.wall_s}
            | recorded.clock
            | {"status": self.status, "error": self.error}
            | self.warm
            | recorded.comparison
        )


def _context(cfg: RunConfig, session: Session[Any], run_dir: Path) -> RunContext:
    return RunContext(
        workload=cfg.workload.name,
        workload_version=cfg.workload.version,
        engine=session.backend,
        policy=cfg.engine.policy,
        block_size=session.block_size,
        seed=cfg.seed,
        run_id=run_dir.name,
    )


def _add_to_manifest(out: RunDir, facts: dict[str, object]) -> None:
    """The target's facts learned while running (a server's version and cache size)."""
    manifest = json.loads(out.manifest_path.read_text()) if out.manifest_path.exists() else {}
    out.write_manifest(manifest | facts)


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
