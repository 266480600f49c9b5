"""The HTTP routes (Starlette): vLLM's OpenAI completions API and cache endpoints over one engine.

POST /v1/completions (JSON or SSE stream), POST /tokenize (a text prompt's ids, as vLLM answers
it: vllm-router's cache_aware reads each prompt through it, docs/fleet.md §5), GET /v1/models,
GET /health, GET /version, GET /metrics (Prometheus text), POST /reset_prefix_cache (vLLM's name)
and GET|POST /flush_cache (SGLang's), GET /step_log?since=N; `request_log` keeps a line per
finished completion (request_log.py).
Handlers never touch the engine: they post to the engine thread and await their request's events. A handler that ends before its request did (the client went away, a
shutdown cancelled it) aborts the request, which frees its KV.

Client input never reaches a traceback: a body is read up to `Limits.max_body_bytes` (413; the
rest is discarded by the protocol, harness/builtin_server/deadlines.py, which also bounds the time
a head and body may take), decoded, checked and tokenised on a worker thread (the event loop
keeps answering /health), and anything malformed is HTTP 400 with vLLM's error body, as are
unknown routes (404) and methods (405). A client that goes away mid-request is one log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from engines.errors import BadInput
from engines.request import CompletionRequest
from harness.builtin_server import protocol as api
from harness.builtin_server.deadlines import TIMED_OUT
from harness.builtin_server.engine_thread import EngineThread
from harness.builtin_server.events import Accepted, Done, Failed, RequestSink, Tokens
from harness.builtin_server.metrics import CONTENT_TYPE, render
from harness.builtin_server.protocol import ApiError, CompletionParams
from harness.builtin_server.reply import Reply
from harness.builtin_server.request_log import CLIENT_ID_HEADER, RequestLog
from harness.builtin_server.text import TextCodec

log = logging.getLogger(__name__)
CLIENT_GONE = 499  # nginx's status for a client that closed the connection (never sent)
SINCE = re.compile(r"[0-9]{1,18}")  # a step index in ASCII digits (int() takes "²" and "١")


@dataclass(frozen=True)
class Limits:
    """What one request may cost the server before it is refused (conf/serve.yaml)."""

    max_body_bytes: int = 32 * 2**20


@dataclass(frozen=True)
class ServedModel:
    """What the routes need to know about the model and engine behind them."""

    name: str
    max_model_len: int
    vocab_size: int
    max_tokens_default: int
    codec: TextCodec | None  # None: token-id prompts only
    created: int  # unix time the server started (the model card's `created`)
    version: str  # the project's version (GET /version)
    worker_tag: str | None = None  # each reply's system_fingerprint (docs/fleet.md §5)
    host_tier: bool = False  # the engine's cache has a host tier: usage carries it (tiers.md §4)
    storage_tier: bool = False  # and a storage tier behind it: SGLang's `storage` (tiers.md §4)


def build_app(
    thread: EngineThread,
    model: ServedModel,
    limits: Limits | None = None,
    request_log: RequestLog | None = None,
) -> Starlette:
    routes = _Routes(thread, model, limits or Limits(), request_log)

    @asynccontextmanager
    async def lifespan(app):
        thread.start()
        try:
            yield
        finally:
            thread.stop()
            if request_log is not None:
                request_log.close()

    return Starlette(
        routes=[
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/tokenize", routes.tokenize, methods=["POST"]),
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/model_info", routes.model_info, methods=["GET"]),
            Route("/health", routes.health, methods=["GET"]),
            Route("/version", routes.version, methods=["GET"]),
            Route("/metrics", routes.metrics, methods=["GET"]),
            Route("/reset_prefix_cache", routes.reset_prefix_cache, methods=["POST"]),
            Route("/flush_cache", routes.flush_cache, methods=["GET", "POST"]),
            Route("/step_log", routes.step_log, methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, ClientDisconnect: _client_gone},
    )


def _error(exc: ApiError, headers: Mapping[str, str] | None = None) -> Response:
    # ASCII-escaped: a message may quote client text holding a lone surrogate (not UTF-8).
    body = json.dumps(exc.body(), ensure_ascii=True, separators=(",", ":")).encode()
    return Response(body, exc.status, headers, media_type="application/json")


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, method not allowed) in vLLM's error shape."""
    assert isinstance(exc, HTTPException)
    return _error(ApiError(str(exc.detail), status=exc.status_code), exc.headers)


async def _client_gone(request: Request, exc: Exception) -> Response:
    """A client that closed its connection before its request was read: one line, no traceback
    (the protocol already logged a body that timed out). The reply goes nowhere."""
    if not request.scope.get("state", {}).get(TIMED_OUT):
        peer = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.warning("%s disconnected before its request to %s was read", peer, request.url.path)
    return Response(status_code=CLIENT_GONE)


def _sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


class _Routes:
    def __init__(
        self,
        thread: EngineThread,
        model: ServedModel,
        limits: Limits,
        request_log: RequestLog | None = None,
    ) -> None:
        self.thread, self.model, self.limits = thread, model, limits
        self.request_log = request_log

    def _finished(self, reply: Reply) -> None:
        if self.request_log is not None:
            self.request_log.append(reply.record())

    # ---------------------------------------------------------------- small routes
    async def model_info(self, request: Request) -> Response:
        """SGLang's worker metadata: sglang-router files a worker under the model it names
        (docs/fleet.md §5), else under "unknown" and refuses requests naming the model."""
        m = self.model
        info = {"model_path": m.name, "tokenizer_path": None, "is_generation": True}
        return JSONResponse({**info, "served_model_name": m.name})

    async def health(self, request: Request) -> Response:
        problem = self.thread.problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": f"prefixbench-{self.model.version}"})

    async def models(self, request: Request) -> Response:
        m = self.model
        return JSONResponse(api.model_list(m.name, m.created, m.max_model_len))

    async def metrics(self, request: Request) -> Response:
        try:
            snap = await self._on_engine(self.thread.snapshot)
            return Response(render(snap, self.model.name), media_type=CONTENT_TYPE)
        except ApiError as exc:
            return _error(exc)

    async def reset_prefix_cache(self, request: Request) -> Response:
        try:
            if await self._on_engine(self.thread.reset_cache):
                return Response(status_code=200)
        except ApiError as exc:
            return _error(exc)
        return _error(ApiError(_REFUSED, status=409))

    async def flush_cache(self, request: Request) -> Response:
        try:
            flushed = await self._on_engine(self.thread.reset_cache)
        except ApiError as exc:
            return PlainTextResponse(f"Cache not flushed: {exc.message}\n", status_code=exc.status)
        if flushed:
            return PlainTextResponse("Cache flushed.\n")
        return PlainTextResponse(f"Cache not flushed: {_REFUSED}\n", status_code=400)

    async def _on_engine(self, fn):
        """`fn`'s result, run on the engine thread; its failure as a 500 ApiError."""
        try:
            return await asyncio.wrap_future(self.thread.call(fn))
        except Exception as exc:
            log.error(
                "%s failed on the engine thread: %s: %s", fn.__name__, type(exc).__name__, exc
            )
            raise ApiError(f"{type(exc).__name__}: {exc}", status=500) from None

    async def step_log(self, request: Request) -> Response:
        raw = request.query_params.get("since", "0")
        if not SINCE.fullmatch(raw):
            return _error(
                ApiError(
                    f"since must be a step index (0-18 ASCII digits), got {api.show(raw)}", "since"
                )
            )
        entries = self.thread.step_log.since(int(raw))
        return JSONResponse({"steps": [asdict(e) for e in entries]})

    # ---------------------------------------------------------------- completions
    async def completions(self, request: Request) -> Response:
        arrival = time.time()
        try:
            raw = await self._read_body(request)
            # Decoding, checking and tokenising a large body takes CPU: off the event loop.
            params, req = await asyncio.to_thread(self._parse, raw)
        except ApiError as exc:
            return _error(exc)  # an unread rest of the body is discarded (deadlines.py)
        sink = RequestSink(asyncio.get_running_loop())
        self.thread.submit(req, sink)
        handed_over = False
        try:
            first = await sink.next()
            if isinstance(first, Failed):
                handed_over = True  # the engine never took it
                return _error(ApiError(first.message, status=first.status))
            assert isinstance(first, Accepted)
            client_id = request.headers.get(CLIENT_ID_HEADER)
            reply = Reply(self.model, req, params, client_id, arrival)
            if params.stream:
                handed_over = True
                stream = self._stream(request, sink, reply)
                return StreamingResponse(stream, media_type="text/event-stream")
            handed_over = True
            return await self._collect(request, sink, reply)
        finally:
            if not handed_over:  # cancelled while waiting for the engine to take it
                self.thread.abort(req.request_id)

    async def tokenize(self, request: Request) -> Response:
        """A text prompt's token ids, the ones its completion would get (vLLM's /tokenize)."""
        try:
            raw = await self._read_body(request)
            ids = await asyncio.to_thread(self._tokenize, raw)
        except ApiError as exc:
            return _error(exc)
        return JSONResponse(api.tokenized(ids, self.model.max_model_len))

    def _tokenize(self, raw: bytes) -> tuple[int, ...]:
        p = api.parse_tokenize(_json(raw))
        self._check_model(p.model)
        if self.model.codec is None:
            raise ApiError(_NO_TEXT.format(self.model.name), "prompt")
        return self._encode(p.prompt_text, None)

    async def _read_body(self, request: Request) -> bytes:
        """The whole body, at most `max_body_bytes` (its arrival time is the protocol's)."""
        limit = self.limits.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ApiError(_too_large(limit), status=413)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(_too_large(limit), status=413)
            chunks.append(chunk)
        return b"".join(chunks)

    def _parse(self, raw: bytes) -> tuple[CompletionParams, CompletionRequest]:
        """A body into the engine's request (a worker thread); ApiError for anything malformed."""
        body = _json(raw)
        try:
            params = api.parse_completion(body)
        except RecursionError:  # comparing or showing a deeply nested field
            raise ApiError("the request body is nested too deeply") from None
        return params, self._engine_request(params)

    def _check_model(self, name: str | None) -> None:
        if name is not None and name != self.model.name:
            # vLLM's OpenAIServingModels.check_model answers an unknown name with 404 NotFoundError.
            raise ApiError(
                f"The model `{api.show(name)[1:-1]}` does not exist; this server serves "
                f"`{self.model.name}`",
                "model",
                status=404,
            )

    def _engine_request(self, p: CompletionParams) -> CompletionRequest:
        m = self.model
        self._check_model(p.model)
        if p.prompt_ids is not None:
            ids = p.prompt_ids
        elif m.codec is None:
            raise ApiError(_NO_TEXT.format(m.name), "prompt")
        else:
            ids = self._encode(p.prompt_text or "", p.max_tokens)
        if len(ids) > m.max_model_len:  # before looking at each id
            raise ApiError(
                f"the prompt has {len(ids)} tokens; this model's maximum context length is "
                f"{m.max_model_len}",
                "prompt",
            )
        bad = next((t for t in ids if not 0 <= t < m.vocab_size), None)
        if bad is not None:
            raise ApiError(f"token id {bad} is out of the vocabulary [0, {m.vocab_size})", "prompt")
        max_tokens = p.max_tokens if p.max_tokens is not None else m.max_tokens_default
        if len(ids) + max_tokens > m.max_model_len:
            raise ApiError(
                f"This model's maximum context length is {m.max_model_len} tokens. However, you "
                f"requested {len(ids) + max_tokens} tokens ({len(ids)} in the prompt, "
                f"{max_tokens} for the completion). Reduce the prompt or max_tokens.",
                "max_tokens" if p.max_tokens is not None else "prompt",
            )
        return CompletionRequest(
            request_id=f"cmpl-{uuid.uuid4().hex}",
            prompt_ids=tuple(ids),
            max_new_tokens=max_tokens,
            n=p.n,
            salt=p.cache_salt,
            priority=p.priority,
        )

    def _encode(self, text: str, max_tokens: int | None) -> tuple[int, ...]:
        m = self.model
        assert m.codec is not None
        fewest = m.codec.min_tokens(text)
        if fewest + (max_tokens or 1) > m.max_model_len:  # too long, tokenised or not
            raise ApiError(
                f"the prompt is {len(text.encode('utf-8', 'surrogatepass')):,} bytes: at least "
                f"{fewest:,} tokens, more than this model's maximum context length of "
                f"{m.max_model_len} tokens",
                "prompt",
            )
        try:
            ids = m.codec.encode(text)
        except BadInput as exc:
            raise ApiError(str(exc), "prompt") from None
        if not ids:
            raise ApiError("the prompt encodes to no tokens", "prompt")
        return ids

    async def _collect(self, request: Request, sink: RequestSink, reply: Reply) -> Response:
        """A whole (non-streamed) reply; a client that disconnects meanwhile aborts it."""
        watcher = asyncio.ensure_future(_on_disconnect(request, sink))
        finished = False
        try:
            while True:
                event = await sink.next()
                if isinstance(event, Tokens):
                    reply.add(event)
                elif isinstance(event, Done):
                    finished = True
                    self._finished(reply)
                    return JSONResponse(reply.whole())
                elif isinstance(event, Failed):
                    finished = event.status != CLIENT_GONE
                    return _error(ApiError(event.message, status=event.status))
        finally:
            watcher.cancel()
            if not finished:
                self.thread.abort(reply.req.request_id)

    async def _stream(
        self, request: Request, sink: RequestSink, reply: Reply
    ) -> AsyncIterator[str]:
        """SSE chunks as vLLM sends them; closing the generator early aborts the request."""
        finished = False
        try:
            while True:
                event = await sink.next()
                if isinstance(event, Tokens):
                    yield _sse(reply.chunk(event))
                elif isinstance(event, Done):
                    finished = True
                    self._finished(reply)
                    if reply.params.include_usage:
                        yield _sse(reply.usage_chunk())
                    yield _sse("[DONE]")
                    return
                elif isinstance(event, Failed):
                    finished = True
                    yield _sse(ApiError(event.message, status=event.status).body())
                    yield _sse("[DONE]")
                    return
        finally:
            if not finished:
                self.thread.abort(reply.req.request_id)


_REFUSED = "requests still hold KV blocks; retry when they have finished"
_NO_TEXT = (
    "model {} has a made-up vocabulary: send the prompt as token ids "
    "(model=smollm2-rand takes text)"
)


def _json(raw: bytes) -> object:
    """A request body decoded; ApiError when it is not JSON."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ApiError("the request body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise ApiError("the request body is not valid JSON") from None


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes (max_body_bytes)"


async def _on_disconnect(request: Request, sink: RequestSink) -> None:
    """Wait for the client to go away (the body is read, so the next message is the
    disconnect), then tell the handler."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            sink.queue.put_nowait(Failed(CLIENT_GONE, "the client disconnected"))
            return
