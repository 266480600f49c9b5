"""The HTTP routes (Starlette): vLLM's OpenAI completions API and cache endpoints over one engine.

POST /v1/completions (JSON or SSE stream), GET /v1/models, GET /health, GET /version, GET /metrics
(Prometheus text), POST /reset_prefix_cache (vLLM's name) and GET|POST /flush_cache (SGLang's),
GET /step_log?since=N. Handlers never touch the engine: they post to the engine thread and await
their request's events. A handler that ends before its request did (the client went away, a
shutdown cancelled it) aborts the request, which frees its KV.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from engines.request import CompletionRequest
from harness.builtin_server import protocol as api
from harness.builtin_server.engine_thread import (
    Accepted,
    Done,
    EngineThread,
    Failed,
    RequestSink,
    Tokens,
)
from harness.builtin_server.metrics import CONTENT_TYPE, render
from harness.builtin_server.protocol import ApiError, CompletionParams
from harness.builtin_server.text import Detokenizer, TextCodec

log = logging.getLogger(__name__)
CLIENT_GONE = 499  # nginx's status for a client that closed the connection (never sent)


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


def build_app(thread: EngineThread, model: ServedModel) -> Starlette:
    routes = _Routes(thread, model)

    @asynccontextmanager
    async def lifespan(app):
        thread.start()
        try:
            yield
        finally:
            thread.stop()

    return Starlette(
        routes=[
            Route("/v1/completions", routes.completions, methods=["POST"]),
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
    )


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _sse(payload: dict | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


class _Routes:
    def __init__(self, thread: EngineThread, model: ServedModel) -> None:
        self.thread, self.model = thread, model

    # ---------------------------------------------------------------- small routes
    async def model_info(self, request: Request) -> Response:
        """SGLang's worker metadata: sglang-router files a worker under the model it names
        (docs/fleet.md §5), else under "unknown" and refuses requests naming the model."""
        m = self.model
        info = {"model_path": m.name, "tokenizer_path": None, "is_generation": True}
        return JSONResponse({**info, "served_model_name": m.name})

    async def health(self, request: Request) -> Response:
        if self.thread.failure is not None:
            return PlainTextResponse(f"engine failed: {self.thread.failure}", status_code=503)
        return Response(status_code=200)

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": f"prefixbench-{self.model.version}"})

    async def models(self, request: Request) -> Response:
        m = self.model
        return JSONResponse(api.model_list(m.name, m.created, m.max_model_len))

    async def metrics(self, request: Request) -> Response:
        snap = await asyncio.wrap_future(self.thread.call(self.thread.snapshot))
        return Response(render(snap, self.model.name), media_type=CONTENT_TYPE)

    async def reset_prefix_cache(self, request: Request) -> Response:
        if await asyncio.wrap_future(self.thread.call(self.thread.reset_cache)):
            return Response(status_code=200)
        return _error(ApiError(_REFUSED, status=409))

    async def flush_cache(self, request: Request) -> Response:
        if await asyncio.wrap_future(self.thread.call(self.thread.reset_cache)):
            return PlainTextResponse("Cache flushed.\n")
        return PlainTextResponse(f"Cache not flushed: {_REFUSED}\n", status_code=400)

    async def step_log(self, request: Request) -> Response:
        raw = request.query_params.get("since", "0")
        if not raw.isdigit():
            return _error(ApiError(f"since must be a step index, got {raw!r}", "since"))
        entries = self.thread.step_log.since(int(raw))
        return JSONResponse({"steps": [asdict(e) for e in entries]})

    # ---------------------------------------------------------------- completions
    async def completions(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            return _error(ApiError("the request body is not valid JSON"))
        try:
            params = api.parse_completion(body)
            req = self._engine_request(params)
        except ApiError as exc:
            return _error(exc)
        sink = RequestSink(asyncio.get_running_loop())
        self.thread.submit(req, sink)
        handed_over = False
        try:
            first = await sink.next()
            if isinstance(first, Failed):
                handed_over = True  # the engine never took it
                return _error(ApiError(first.message, status=first.status))
            assert isinstance(first, Accepted)
            reply = _Reply(self.model, req, params)
            if params.stream:
                handed_over = True
                stream = self._stream(request, sink, reply)
                return StreamingResponse(stream, media_type="text/event-stream")
            handed_over = True
            return await self._collect(request, sink, reply)
        finally:
            if not handed_over:  # cancelled while waiting for the engine to take it
                self.thread.abort(req.request_id)

    def _engine_request(self, p: CompletionParams) -> CompletionRequest:
        m = self.model
        if p.model is not None and p.model != m.name:
            # vLLM's OpenAIServingModels.check_model answers an unknown name with 404 NotFoundError.
            raise ApiError(
                f"The model `{p.model}` does not exist; this server serves `{m.name}`",
                "model",
                status=404,
            )
        if p.prompt_ids is not None:
            ids = p.prompt_ids
        elif m.codec is None:
            raise ApiError(
                f"model {m.name} has a made-up vocabulary: send the prompt as token ids "
                "(model=smollm2-rand takes text)",
                "prompt",
            )
        else:
            ids = m.codec.encode(p.prompt_text or "")
            if not ids:
                raise ApiError("the prompt encodes to no tokens", "prompt")
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

    async def _collect(self, request: Request, sink: RequestSink, reply: _Reply) -> Response:
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
                    return JSONResponse(reply.whole())
                elif isinstance(event, Failed):
                    finished = event.status != CLIENT_GONE
                    return _error(ApiError(event.message, status=event.status))
        finally:
            watcher.cancel()
            if not finished:
                self.thread.abort(reply.req.request_id)

    async def _stream(
        self, request: Request, sink: RequestSink, reply: _Reply
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


async def _on_disconnect(request: Request, sink: RequestSink) -> None:
    """Wait for the client to go away (the body is read, so the next message is the
    disconnect), then tell the handler."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            sink.queue.put_nowait(Failed(CLIENT_GONE, "the client disconnected"))
            return


class _Reply:
    """One request's reply as it is built: per-sample text and ids, usage at the end."""

    def __init__(self, model: ServedModel, req: CompletionRequest, params: CompletionParams):
        self.model, self.req, self.params = model, req, params
        self.created = int(time.time())
        self.samples = [Detokenizer(model.codec) for _ in range(req.n)]
        self.texts = [""] * req.n
        self.started = [False] * req.n
        self.outputs = [0] * req.n
        self.cached = [0] * req.n
        self.first_sample: int | None = None  # the sample that emitted first
        self.last_finished = 0  # the sample that finished last

    def add(self, event: Tokens) -> str:
        """Take a sample's new tokens; the text they complete."""
        detok = self.samples[event.sample]
        text = detok.add(event.ids)
        if self.first_sample is None:
            self.first_sample = event.sample
        if event.finish is not None:
            self.last_finished = event.sample
            text += detok.flush()
            self.outputs[event.sample] = event.finish.output_tokens
            self.cached[event.sample] = event.finish.cached_tokens
        self.texts[event.sample] += text
        return text

    def chunk(self, event: Tokens) -> dict:
        text = self.add(event)
        ids = self.params.return_token_ids
        first = not self.started[event.sample]
        self.started[event.sample] = True
        choice = api.choice(
            event.sample,
            text,
            "length" if event.finish is not None else None,
            token_ids=list(event.ids) if ids else None,
            prompt_token_ids=list(self.req.prompt_ids) if ids and first else None,
        )
        return self._envelope([choice], None)

    def usage(self, sample: int) -> dict:
        """One prompt for all samples, as vLLM counts it, and one sample's cached tokens."""
        return api.usage(len(self.req.prompt_ids), sum(self.outputs), self.cached[sample])

    def usage_chunk(self) -> dict:
        # vLLM 0.32 (entrypoints/openai/completion/serving.py) streams the cached tokens of the
        # first output it received, and answers a whole reply with the final output's.
        first = self.first_sample if self.first_sample is not None else 0
        return self._envelope([], self.usage(first))

    def whole(self) -> dict:
        ids = self.params.return_token_ids
        prompt = list(self.req.prompt_ids)
        choices = [
            api.choice(
                i,
                self.texts[i],
                "length",
                token_ids=list(d.ids) if ids else None,
                prompt_token_ids=prompt if ids else None,
            )
            for i, d in enumerate(self.samples)
        ]
        return self._envelope(choices, self.usage(self.last_finished))

    def _envelope(self, choices: list[dict], usage: dict | None) -> dict:
        out = api.completion(self.req.request_id, self.created, self.model.name, choices, usage)
        if self.model.worker_tag is not None:
            out["system_fingerprint"] = self.model.worker_tag
        return out
