"""The engine thread: continuous batching off the event loop, on the engine's incremental interface.

    HTTP handlers ──inbox (submit, abort, call)──▶ engine thread: drain inbox ▸ engine.step() ▸ …
          ▲                                                   │
          └── per-request asyncio queue ◀─ call_soon_threadsafe ┘ (tokens as each step makes them)

The engine is single-threaded, so everything that touches it runs here: new requests join
between steps (the inbox is drained before each step), a disconnected client's request is
aborted there, and `/metrics` or a cache reset run as calls between two steps. Each step's
tokens leave for their requests' queues at once, one hand-over per request and step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from engines.engine import CapacityError, Engine, StepOutput
from engines.errors import BadInput
from engines.request import CompletionRequest
from harness.builtin_server.metrics import MetricsSnapshot
from harness.builtin_server.step_log import StepEntry, StepLog

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ events, engine -> handler


@dataclass(frozen=True)
class Accepted:
    child_ids: list[str]


@dataclass(frozen=True)
class SampleFinish:
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Tokens:
    sample: int
    ids: list[int]
    finish: SampleFinish | None  # set on the step that emitted the sample's last token


@dataclass(frozen=True)
class Done:
    """Every sample of the request has finished."""


@dataclass(frozen=True)
class Failed:
    status: int
    message: str


Event = Accepted | Tokens | Done | Failed


class RequestSink:
    """One request's event queue on the event loop, fed from the engine thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Event] = asyncio.Queue()

    def push(self, events: list[Event]) -> None:
        # RuntimeError: the event loop has closed, nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._put, events)

    def _put(self, events: list[Event]) -> None:
        for event in events:
            self.queue.put_nowait(event)

    async def next(self) -> Event:
        return await self.queue.get()


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


@dataclass
class EngineThread:
    engine: Engine
    step_log: StepLog
    scheduler: str = ""
    failure: str | None = None  # set when a step crashed: the server then refuses requests
    _inbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    _children: dict[str, _Child] = field(default_factory=dict)
    _parents: dict[str, RequestSink] = field(default_factory=dict)
    _counters: _Counters = field(default_factory=_Counters)
    _thread: threading.Thread | None = None
    _steps_logged: int = 0

    # ---------------------------------------------------------------- handler side
    def start(self) -> None:
        self.engine.restart()
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

    def submit(self, req: CompletionRequest, sink: RequestSink) -> None:
        self._inbox.put(_Submit(req, sink))

    def abort(self, request_id: str) -> None:
        self._inbox.put(_Abort(request_id))

    def fail_in_flight(self, message: str) -> None:
        """End every request in flight with a 503 (shutdown: their handlers then return)."""
        self.call(lambda: self._fail_all(503, message))

    def call(self, fn: Callable[[], object]) -> Future:
        """Run `fn` on the engine thread between two steps; its result comes in the future."""
        future: Future = Future()
        self._inbox.put(_Call(fn, future))
        return future

    # ---------------------------------------------------------------- engine side
    def _run(self) -> None:
        engine = self.engine
        while True:
            idle = not engine.has_work
            if idle:
                engine.idle()  # a scheduler design may reset state (SGLang's new-token ratio)
            # A failed engine steps no more: wait for commands (to refuse them) instead of spinning.
            if not self._drain(block=idle or self.failure is not None):
                return
            if engine.has_work and self.failure is None:
                self._step()

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
        except Exception as exc:  # a bug: keep serving errors rather than hanging clients
            traceback.print_exc()
            self.failure = f"{type(exc).__name__}: {exc}"
            self._fail_all(500, f"the engine failed: {self.failure}")
            return
        if not out.progressed:
            return  # the engine raises CapacityError if it stays stuck
        self._log_steps(out.end_s)
        self._deliver(out)
        engine.records.clear()  # the replies carry what a server needs; keep memory flat

    def _log_steps(self, end_s: float) -> None:
        """Move the engine's new step records into the server's (bounded) log."""
        records = self.engine.loop.step_log
        if not records:
            return
        for rec in records:
            entry = StepEntry(
                self._steps_logged, end_s, rec.kind, list(rec.scheduled), list(rec.preempted)
            )
            self.step_log.append(entry)
            self._steps_logged += 1
        records.clear()  # the engine would keep every step of a server's lifetime otherwise

    def _deliver(self, out: StepOutput) -> None:
        counters = self._counters
        finishes = {}
        for rec in out.finished:
            finishes[rec.request_id] = SampleFinish(
                rec.prompt_tokens, rec.cached_tokens, rec.output_tokens
            )
            counters.prompt_tokens_cached += rec.cached_tokens
            counters.preemptions += rec.num_preemptions
            counters.requests_finished += 1
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

    def _fail_all(self, status: int, message: str) -> None:
        for pid, sink in list(self._parents.items()):
            self.engine.abort_request(pid)
            sink.push([Failed(status, message)])
        self._parents.clear()
        self._children.clear()

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
        )
