"""The async HTTP client: one pooled aiohttp session, streamed completions timed per chunk.

Every chunk's arrival is read on `time.perf_counter()` (monotonic) the moment its line is
parsed; a chunk's tokens share that time. A failure is a `Reply` with a status, the HTTP code
and the server's message, never an exception: refused connections, HTTP errors, a stream cut
mid-way (what was received is kept) and timeouts alike. aiohttp, not httpx: its cost per
request here is a fraction of httpx's, which is what the client's send lag at high rates needs
(scripts/bench_client.py). Nothing outside this module sees the library: `Response` and
`TRANSPORT_ERRORS` are what the target reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from harness.live_server.config import ServerConfig

OK, HTTP_ERROR, FAILED, TIMEOUT = "ok", "http_error", "failed", "timeout"


@dataclass
class ChoiceOut:
    """One sample of a reply as it streamed in."""

    token_ids: list[int] = field(default_factory=list)
    token_times_s: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    ids_reported: bool = False  # the server sent token ids (not only text)


@dataclass(frozen=True)
class Reply:
    status: str  # ok | http_error | failed | timeout
    http_status: int | None
    error: str | None
    send_s: float  # perf_counter when the request was handed to the client
    finish_s: float  # perf_counter of the last byte (or of the failure)
    choices: tuple[ChoiceOut, ...]
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_token_ids: tuple[int, ...] | None = None  # as the server read the prompt


@dataclass(frozen=True)
class Response:
    """A plain (non-streamed) reply."""

    status_code: int
    text: str

    def json(self) -> object:
        return json.loads(self.text)


# What a request can raise when the server is away, slow or broken (the target catches these).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
)


class ServerClient:
    """Connection reuse for every request of a run; call `aclose()` when done. The session is
    made on first use, inside the running event loop."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(
                total=self.cfg.request_timeout_s, sock_connect=self.cfg.connect_timeout_s
            )
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)  # no client-side cap
            self._session = aiohttp.ClientSession(
                base_url=self.cfg.base_url + "/", timeout=timeout, connector=connector
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str, timeout_s: float | None = None) -> Response:
        return await self._plain("GET", path, timeout_s or self.cfg.connect_timeout_s)

    async def post(self, path: str, timeout_s: float | None = None) -> Response:
        return await self._plain("POST", path, timeout_s or self.cfg.request_timeout_s)

    async def _plain(self, method: str, path: str, timeout_s: float) -> Response:
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.cfg.connect_timeout_s)
        async with self._http().request(method, path.lstrip("/"), timeout=timeout) as resp:
            return Response(resp.status, await resp.text(errors="replace"))

    async def complete(self, body: Mapping[str, object], num_choices: int) -> Reply:
        """POST /v1/completions with `stream: true` and read the reply chunk by chunk."""
        choices = tuple(ChoiceOut() for _ in range(num_choices))
        state: dict[str, object] = {}
        send_s = time.perf_counter()
        try:
            async with self._http().post("v1/completions", json=body) as resp:
                if resp.status >= 400:
                    text = await resp.text(errors="replace")
                    return Reply(
                        HTTP_ERROR, resp.status, _message(text), send_s,
                        time.perf_counter(), choices,
                    )  # fmt: skip
                async for raw in resp.content:
                    now = time.perf_counter()
                    if raw.startswith(b"data:"):
                        data = raw[5:].strip()
                        if data and data != b"[DONE]":
                            _take_chunk(json.loads(data), now, choices, state)
        except asyncio.TimeoutError as exc:
            return _failed(TIMEOUT, exc, send_s, choices, state)
        except (aiohttp.ClientError, OSError, json.JSONDecodeError) as exc:
            return _failed(FAILED, exc, send_s, choices, state)
        return _reply(OK, 200, None, send_s, time.perf_counter(), choices, state)


def _take_chunk(chunk: dict, now: float, choices: tuple[ChoiceOut, ...], state: dict) -> None:
    if chunk.get("usage"):
        state["usage"] = chunk["usage"]
    if "error" in chunk:  # an error event inside the stream (e.g. the engine died)
        state["error"] = _message(json.dumps(chunk))
    for c in chunk.get("choices") or ():
        index = int(c.get("index", 0))
        if not 0 <= index < len(choices):
            continue
        out = choices[index]
        if c.get("prompt_token_ids") and "prompt_token_ids" not in state:
            state["prompt_token_ids"] = tuple(c["prompt_token_ids"])
        ids = c.get("token_ids")
        text = c.get("text") or ""
        out.text += text
        if ids:
            out.ids_reported = True
            out.token_ids.extend(int(t) for t in ids)
            out.token_times_s.extend([now] * len(ids))
        elif text and not out.ids_reported:
            out.token_times_s.append(now)  # a text-only server: one chunk taken as one token
        if c.get("finish_reason"):
            out.finish_reason = c["finish_reason"]


def _reply(status, code, error, send_s, finish_s, choices, state) -> Reply:
    usage = state.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    if state.get("error") and status == OK:
        status, error = FAILED, state["error"]
    return Reply(
        status=status,
        http_status=code,
        error=error,
        send_s=send_s,
        finish_s=finish_s,
        choices=choices,
        prompt_tokens=usage.get("prompt_tokens"),
        cached_tokens=details.get("cached_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        prompt_token_ids=state.get("prompt_token_ids"),
    )


def _failed(status: str, exc: BaseException, send_s: float, choices, state) -> Reply:
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return _reply(status, None, message, send_s, time.perf_counter(), choices, state)


def _message(text: str) -> str:
    """The server's error message from a JSON error body, else the body's first line."""
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        return (text.strip().splitlines() or ["(empty body)"])[0][:500]
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return str(err).strip().splitlines()[0][:500] if str(err).strip() else "(empty error)"
