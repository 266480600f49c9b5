"""The engine thread: continuous batching off the event loop, on the engine's incremental interface.

    HTTP handlers ──inbox (submit, abort, call)──▶ engine thread: drain inbox ▸ engine.step() ▸ …
          ▲                                                   │
          └── per-request asyncio queue ◀─ call_soon_threadsafe ┘ (tokens as each step makes them)

The engine is single-threaded, so everything that touches it runs here: new requests join
between steps (the inbox is drained before each step), a disconnected client's request is
aborted there, and `/metrics` or a cache reset run as calls between two steps. Each step's
tokens leave for their requests' queues at once, one hand-over per request and step.

The thread is supervised: an exception in a step or in its side work (the step log, counters,
a hand-over) fails the requests it touched with HTTP 500 and aborts them in the engine, whose
next steps release their KV; serving goes on. MAX_CRASHES in a row, or the thread ending, make
the failure permanent: /health answers 503 and every request is refused, none waits forever.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from engines.cache.protocol import KvEventSource
from engines.engine import CapacityError, Engine, StepOutput
from engines.errors import BadInput
from engines.records import RequestRecord
from engines.request import CompletionRequest
from harness.builtin_server.events import (
    Accepted,
    Done,
    Event,
    Failed,
    RequestSink,
    SampleFinish,
    Tokens,
)
from harness.builtin_server.kv_publisher import KvEventPublisher
from harness.builtin_server.metrics import MetricsSnapshot
from harness.builtin_server.step_log import StepEntry, StepLog

log = logging.getLogger(__name__)
MAX_CRASHES = 3  # failed steps in a row after which the engine is considered broken


# ------------------------------------------------------------------ commands, handler -> engine


@dataclass(frozen=True)
class _Submit:
    req: CompletionRequest
    sink: RequestSink


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _Call:
    fn: Callable[[], object]
    future: Future


@dataclass(frozen=True)
class _Stop:
    pass


@dataclass
class _Child:
    parent: str
    sink: RequestSink
    sample: int
    prompt_tokens: int
    started: bool = False


@dataclass
class _Counters:
    """What /metrics reports beyond the cache's own statistics (which a reset zeroes)."""

    queries_before_reset: int = 0
    hits_before_reset: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prompt_tokens_cached: int = 0
    preemptions: int = 0
    requests_finished: int = 0
    external_queries: int = 0  # a host tier's, per finished request (metrics.py)
    external_hits: int = 0
    cached_host: int = 0
    cached_storage: int = 0  # a storage tier's, not among cached_host


@dataclass
class EngineThread:
    engine: Engine
    step_log: StepLog
    scheduler: str = ""
    # Publishes each step's KV-cache events (a KvEventSource cache keeps them once recording)
    publisher: KvEventPublisher | None = None
    host_tier_tokens: int = 0  # the engine's host tier (0: none), for /metrics
    storage_tier: bool = False  # a storage tier behind the host tier, for /metrics
    failure: str | None = None  # set when the engine broke: the server then refuses requests
    _inbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    _children: dict[str, _Child] = field(default_factory=dict)
    _parents: dict[str, RequestSink] = field(default_factory=dict)
    _counters: _Counters = field(default_factory=_Counters)
    _thread: threading.Thread | None = None
    # The inbox's gate: once the loop has ended nothing more goes in, and what went in before
    # is answered by the loop's last act, so no handler waits on a thread that is gone.
    _gate: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False
    _steps_logged: int = 0
    _crashes: int = 0  # failed steps in a row

    # ---------------------------------------------------------------- handler side
    def start(self) -> None:
        self.engine.restart()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Abort what is still in flight, end the thread, wait for it."""
        if self._thread is None:
            return
        self._inbox.put(_Stop())
        self._thread.join(timeout_s)
        self._thread = None
        self.step_log.close()
        if self.publisher is not None:
            self.publisher.close()

    def problem(self) -> str | None:
        """Why the server cannot serve now (GET /health answers 503 with it), or None."""
        if self.failure is not None:
            return f"the engine has failed: {self.failure}"
        if self._thread is not None and not self._thread.is_alive():
            return "the engine thread has stopped"
        if self.step_log.error is not None:
            return f"the step log cannot be written: {self.step_log.error}"
        return None

    def submit(self, req: CompletionRequest, sink: RequestSink) -> None:
        if not self._send(_Submit(req, sink)):
            sink.push([Failed(503, "the engine thread has stopped")])

    def abort(self, request_id: str) -> None:
        self._send(_Abort(request_id))

    def fail_in_flight(self, message: str) -> None:
        """End every request in flight with a 503 (shutdown: their handlers then return)."""
        self.call(lambda: self._fail_all(503, message))

    def call(self, fn: Callable[[], object]) -> Future:
        """Run `fn` on the engine thread between two steps; its result comes in the future."""
        future: Future = Future()
        if not self._send(_Call(fn, future)):
            future.set_exception(RuntimeError("the engine thread has stopped"))
        return future

    def _send(self, command: _Submit | _Abort | _Call | _Stop) -> bool:
        """Queue a command for the loop; False once the loop has ended (or never started)."""
        with self._gate:
            if self._closed or self._thread is None or not self._thread.is_alive():
                return False
            self._inbox.put(command)
            return True

    def _close(self, message: str) -> None:
        """The loop's last act: shut the gate, then refuse what was queued before it shut."""
        with self._gate:
            self._closed = True
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, _Submit):
                command.sink.push([Failed(503, message)])
            elif isinstance(command, _Call):
                command.future.set_exception(RuntimeError(message))

    # ---------------------------------------------------------------- engine side
    def _run(self) -> None:
        stopped = False
        try:
            while not stopped:
                try:
                    stopped = not self._iterate()
                except Exception as exc:  # outside a step: a command or the idle hook
                    self._crashed(exc, self._parents, "the engine")
        finally:  # only a BaseException ends the loop without _Stop: never silently
            message = "the server is shutting down"
            if not stopped:
                self.failure = self.failure or "the engine thread stopped"
                log.error("the engine thread stopped: %s", self.failure)
                message = f"the engine has failed: {self.failure}"
                self._fail_all(503, message)
            self._close(message)

    def _iterate(self) -> bool:
        engine = self.engine
        idle = not engine.has_work
        if idle:
            engine.idle()  # a scheduler design may reset state (SGLang's new-token ratio)
        # A failed engine steps no more: wait for commands (to refuse them) instead of spinning.
        if not self._drain(block=idle or self.failure is not None):
            return False
        if engine.has_work and self.failure is None:
            self._step()
        return True

    def _drain(self, block: bool) -> bool:
        """Handle every queued command (waiting for one if `block`); False once told to stop."""
        try:
            command = self._inbox.get(block=block)
        except queue.Empty:
            return True
        while True:
            if isinstance(command, _Stop):
                self._fail_all(503, "the server is shutting down")
                return False
            self._handle(command)
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def _handle(self, command) -> None:
        if isinstance(command, _Submit):
            self._submit(command.req, command.sink)
        elif isinstance(command, _Abort):
            self._abort(command.request_id)
        elif isinstance(command, _Call):
            try:
                command.future.set_result(command.fn())
            except Exception as exc:  # the caller sees it; the engine thread goes on
                command.future.set_exception(exc)

    def _submit(self, req: CompletionRequest, sink: RequestSink) -> None:
        if self.failure is not None:
            sink.push([Failed(503, f"the engine has failed: {self.failure}")])
            return
        try:
            child_ids = self.engine.submit(req, self.engine.clock.now())
        except BadInput as exc:
            sink.push([Failed(400, str(exc))])
            return
        self._parents[req.request_id] = sink
        for sample, cid in enumerate(child_ids):
            self._children[cid] = _Child(req.request_id, sink, sample, len(req.prompt_ids))
        sink.push([Accepted(child_ids)])

    def _abort(self, request_id: str) -> None:
        if self._parents.pop(request_id, None) is None:
            return  # finished already
        self.engine.abort_request(request_id)
        for cid in [c for c, ch in self._children.items() if ch.parent == request_id]:
            del self._children[cid]

    def _step(self) -> None:
        engine = self.engine
        try:
            out = engine.step()
        except CapacityError as exc:  # requests that can never be scheduled: end them all
            self._fail_all(503, str(exc))
            return
        except Exception as exc:  # a bug: fail what is in flight, try to go on
            self._crashed(exc, self._parents, "the engine")
            return
        if not out.progressed:
            return  # the engine raises CapacityError if it stays stuck
        touched = self._touched(out)
        cache = engine.cache  # a publisher is made only for a KvEventSource (server.prepare)
        if self.publisher is not None and isinstance(cache, KvEventSource):
            self.publisher.publish(cache.take_kv_events())  # this step's (and a reset before it)
        try:
            self._log_steps(out.end_s)
        except OSError as exc:  # the step ran; its requests are failed, the next steps go on
            self._fail(touched, 500, f"the step log could not be written: {exc.strerror or exc}")
        try:
            self._deliver(out)
        except Exception as exc:
            self._crashed(exc, touched, "the reply")
            return
        finally:
            engine.records.clear()  # the replies carry what a server needs; keep memory flat
        self._crashes = 0

    def _touched(self, out: StepOutput) -> set[str]:
        """The parent requests a step emitted tokens for or finished."""
        parents = {ch.parent for cid in out.tokens if (ch := self._children.get(cid)) is not None}
        return parents | set(out.finished_parents)

    def _crashed(self, exc: Exception, parents, what: str) -> None:
        """An unexpected exception: fail `parents` with 500, and give up after MAX_CRASHES."""
        traceback.print_exc()
        self._crashes += 1
        reason = f"{type(exc).__name__}: {exc}"
        if self._crashes >= MAX_CRASHES:
            self.failure = reason
            self._fail_all(500, f"the engine failed: {reason}")
        else:
            self._fail(set(parents), 500, f"{what} failed: {reason}")

    def _log_steps(self, end_s: float) -> None:
        """Move the engine's new step records into the server's (bounded) log."""
        records = self.engine.loop.step_log
        if not records:
            return
        try:
            for rec in records:
                entry = StepEntry(
                    self._steps_logged, end_s, rec.kind, list(rec.scheduled), list(rec.preempted)
                )
                self._steps_logged += 1
                self.step_log.append(entry)
        finally:
            records.clear()  # the engine would keep every step of a server's lifetime otherwise

    def _deliver(self, out: StepOutput) -> None:
        counters = self._counters
        finishes = {}
        for rec in out.finished:
            if rec.request_id not in self._children:
                continue  # its request was failed (the step log) or has gone
            finishes[rec.request_id] = SampleFinish(
                rec.prompt_tokens,
                rec.cached_tokens,
                rec.output_tokens,
                rec.host_cached_tokens,
                rec.storage_cached_tokens,
            )
            counters.prompt_tokens_cached += rec.cached_tokens
            counters.preemptions += rec.num_preemptions
            counters.requests_finished += 1
            if self.host_tier_tokens:
                self._count_tier(rec)
        batches: dict[int, tuple[RequestSink, list[Event]]] = {}
        for cid, ids in out.tokens.items():
            child = self._children.get(cid)
            if child is None:
                continue
            if not child.started:
                child.started = True
                counters.prompt_tokens += child.prompt_tokens
            counters.generation_tokens += len(ids)
            finish = finishes.get(cid)
            if finish is not None:
                del self._children[cid]
            batch = batches.setdefault(id(child.sink), (child.sink, []))[1]
            batch.append(Tokens(child.sample, list(ids), finish))
        for pid in out.finished_parents:
            sink = self._parents.pop(pid, None)
            if sink is not None:
                batches.setdefault(id(sink), (sink, []))[1].append(Done())
        for sink, events in batches.values():
            sink.push(events)

    def _count_tier(self, rec: RequestRecord) -> None:
        """SGLang's host source, and under vLLM's scheduler its connector stats of the request's
        first admission (v1/core/sched/scheduler.py, 0.33): the tokens past the device hit were
        looked up, the host part of the cached tokens hit. A re-admission after preemption is
        counted apart upstream, not in these counters; the record keeps the first admission's
        figures. Under SGLang's scheduler there is no connector, and the prefix-cache hits
        already count the host part as SGLang's cached tokens do. A storage tier is behind the
        same connector upstream (vLLM's tiering), so its part is among the external hits."""
        c = self._counters
        c.cached_host += rec.host_cached_tokens
        c.cached_storage += rec.storage_cached_tokens
        if self.scheduler == "vllm":
            external = rec.host_cached_tokens + rec.storage_cached_tokens
            c.external_queries += rec.prompt_tokens - (rec.cached_tokens - external)
            c.external_hits += external

    def _fail(self, parents: set[str], status: int, message: str) -> None:
        """End these requests with an error event; abort them in the engine (the next steps
        release their KV: a running sequence finishes at its next step)."""
        for pid in parents:
            sink = self._parents.pop(pid, None)
            with contextlib.suppress(Exception):  # an engine that broke may refuse; go on
                self.engine.abort_request(pid)
            for cid in [c for c, ch in self._children.items() if ch.parent == pid]:
                del self._children[cid]
            if sink is not None:
                sink.push([Failed(status, message)])

    def _fail_all(self, status: int, message: str) -> None:
        self._fail(set(self._parents), status, message)

    # ---------------------------------------------------------------- calls (engine thread)
    def reset_cache(self) -> bool:
        """The cache's reset (refused while a request holds KV); counters carry on across it."""
        stats = self.engine.cache.stats()
        if not self.engine.cache.reset():
            return False
        self._counters.queries_before_reset += stats.queries
        self._counters.hits_before_reset += stats.hits
        return True

    def snapshot(self) -> MetricsSnapshot:
        cache, loop, c = self.engine.cache, self.engine.loop, self._counters
        stats, use = cache.stats(), cache.usage()
        return MetricsSnapshot(
            prefix_cache_queries=c.queries_before_reset + stats.queries,
            prefix_cache_hits=c.hits_before_reset + stats.hits,
            prompt_tokens=c.prompt_tokens,
            generation_tokens=c.generation_tokens,
            prompt_tokens_cached=c.prompt_tokens_cached,
            preemptions=c.preemptions,
            requests_finished=c.requests_finished,
            requests_running=len(loop.running),
            requests_waiting=len(loop.waiting),
            kv_cache_usage=use.protected / use.capacity if use.capacity else 0.0,
            block_size=cache.block_size,
            num_blocks=cache.num_blocks,
            cache=cache.name,
            scheduler=self.scheduler,
            external_queries=c.external_queries,
            external_hits=c.external_hits,
            cached_device=c.prompt_tokens_cached - c.cached_host - c.cached_storage,
            cached_host=c.cached_host,
            cached_storage=c.cached_storage,
            host_tier_tokens=self.host_tier_tokens,
            storage_tier=self.storage_tier,
        )
