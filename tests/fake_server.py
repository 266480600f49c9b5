"""A small OpenAI-style server on loopback whose answers a test scripts, malformed ones included.

It speaks the vLLM flavour the harness's live-server client reads (GET /v1/models, /version,
/metrics with `vllm:cache_config_info`, POST /reset_prefix_cache, streamed /v1/completions with
token ids and usage), over a real socket in a thread of its own: the client's reads, caps and
timeouts meet real HTTP. Each `Script` field turns one answer bad (tests/run/test_client_faults.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from dataclasses import dataclass, field

from aiohttp import web

MIB = 1 << 20


@dataclass
class Script:
    """How the server answers; the defaults are a well-behaved vLLM-like server."""

    models_body: bytes | None = None  # /v1/models as given (None: one model "m")
    models_flood_bytes: int = 0  # /v1/models: this many bytes, streamed, no length announced
    version_body: bytes = b'{"version": "0.0-fake"}'
    version_flood_bytes: int = 0
    metrics_flood_bytes: int = 0
    block_size: str = "16"
    num_gpu_blocks: str = "257"
    hits: str = "0"  # vllm:prefix_cache_hits_total, as text ("NaN" allowed)
    reset_status: int = 200
    completion_status: int = 200
    usage: dict = field(default_factory=dict)  # merged into the computed usage
    usage_only_on: int | None = None  # apply `usage` to this request (0-based) only
    num_tokens: int | None = None  # tokens sent per sample (None: max_tokens)
    no_done: bool = False  # end the stream without its [DONE]
    hang: bool = False  # completions: headers never sent
    stream_flood_bytes: int = 0  # completions: one endless line of this many bytes
    sent_bytes: int = 0  # filled in: bytes a flood managed to write before the client left
    num_requests: int = 0  # filled in: completions received


class FakeServer:
    """`with FakeServer(script) as url:` serves on 127.0.0.1, a free port, until the block ends."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    def __enter__(self) -> str:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake server did not start")
        return self.url

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self._stopping.set()  # a hung handler returns, so the cleanup does not wait on it
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset)
        app.router.add_post("/v1/completions", self.complete)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    async def _flood(
        self, request: web.Request, num_bytes: int, head: bytes = b""
    ) -> web.StreamResponse:
        """`num_bytes` of one endless JSON string, chunked; stops when the client goes away."""
        resp = web.StreamResponse()
        await resp.prepare(request)
        chunk = b"x" * MIB
        try:
            await resp.write(head + b'{"data": "')
            while self.script.sent_bytes < num_bytes:
                await resp.write(chunk)
                self.script.sent_bytes += len(chunk)
        except (ConnectionError, RuntimeError):  # the client stopped reading and closed
            pass
        return resp

    async def models(self, request: web.Request) -> web.StreamResponse:
        if self.script.models_flood_bytes:
            return await self._flood(request, self.script.models_flood_bytes)
        body = (
            self.script.models_body
            or json.dumps(
                {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}
            ).encode()
        )
        return web.Response(body=body, content_type="application/json")

    async def version(self, request: web.Request) -> web.StreamResponse:
        if self.script.version_flood_bytes:
            return await self._flood(request, self.script.version_flood_bytes)
        return web.Response(body=self.script.version_body, content_type="application/json")

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if self.script.metrics_flood_bytes:
            return await self._flood(request, self.script.metrics_flood_bytes, b"# ")
        s = self.script
        text = (
            f'vllm:cache_config_info{{block_size="{s.block_size}",'
            f'num_gpu_blocks="{s.num_gpu_blocks}"}} 1.0\n'
            f'vllm:prefix_cache_hits_total{{model_name="m"}} {s.hits}\n'
            'vllm:prefix_cache_queries_total{model_name="m"} 0\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def reset(self, request: web.Request) -> web.Response:
        return web.Response(status=self.script.reset_status, text="reset")

    async def complete(self, request: web.Request) -> web.StreamResponse:
        s = self.script
        if s.hang:  # until the test ends
            await self._stopping.wait()
        if s.completion_status != 200:
            return web.json_response(
                {"error": {"message": "scripted failure"}}, status=s.completion_status
            )
        body = await request.json()
        number = s.num_requests
        s.num_requests += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if s.stream_flood_bytes:
            return await self._flood_stream(resp, s.stream_flood_bytes)
        # The client stops reading a bad reply and leaves: not an error of this server.
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._stream(resp, body, number)
        return resp

    async def _stream(self, resp: web.StreamResponse, body: dict, number: int) -> None:
        s = self.script
        prompt = body["prompt"]
        n = body.get("n", 1)
        num_out = body["max_tokens"] if s.num_tokens is None else s.num_tokens
        for i in range(num_out):
            for index in range(n):
                choice = {"index": index, "text": f" t{i + 1}", "token_ids": [i + 1]}
                if i == 0 and index == 0:
                    choice["prompt_token_ids"] = prompt
                await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": num_out * n,
            "prompt_tokens_details": {"cached_tokens": 0},
            **(s.usage if s.usage_only_on in (None, number) else {}),
        }
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        if not s.no_done:
            await resp.write(b"data: [DONE]\n\n")

    async def _flood_stream(self, resp: web.StreamResponse, num_bytes: int) -> web.StreamResponse:
        try:
            await resp.write(b'data: {"choices": [{"text": "')
            while self.script.sent_bytes < num_bytes:
                await resp.write(b"x" * MIB)
                self.script.sent_bytes += MIB
        except (ConnectionError, RuntimeError):
            pass
        return resp
