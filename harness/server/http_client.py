"""The async HTTP client: one pooled httpx.AsyncClient, streamed completions timed per chunk.

Every chunk's arrival is read on `time.perf_counter()` (monotonic) the moment its line is
parsed; a chunk's tokens share that time. A failure is a `Reply` with a status, the HTTP code
and the server's message, never an exception: refused connections, HTTP errors, a stream cut
mid-way (what was received is kept) and timeouts alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from harness.server.config import ServerConfig

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


class ServerClient:
    """Connection reuse for every request of a run; call `aclose()` when done."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        timeout = httpx.Timeout(cfg.request_timeout_s, connect=cfg.connect_timeout_s)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
        self._http = httpx.AsyncClient(base_url=cfg.base_url, timeout=timeout, limits=limits)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def get(self, path: str, timeout_s: float | None = None) -> httpx.Response:
        return await self._http.get(path, timeout=timeout_s or self.cfg.connect_timeout_s)

    async def post(self, path: str, timeout_s: float | None = None) -> httpx.Response:
        return await self._http.post(path, timeout=timeout_s or self.cfg.request_timeout_s)

    async def complete(self, body: Mapping[str, object], num_choices: int) -> Reply:
        """POST /v1/completions with `stream: true` and read the reply chunk by chunk."""
        choices = tuple(ChoiceOut() for _ in range(num_choices))
        state: dict[str, object] = {}
        send_s = time.perf_counter()
        try:
            async with self._http.stream("POST", "/v1/completions", json=body) as resp:
                if resp.status_code >= 400:
                    text = (await resp.aread()).decode("utf-8", "replace")
                    return Reply(
                        HTTP_ERROR, resp.status_code, _message(text), send_s,
                        time.perf_counter(), choices,
                    )  # fmt: skip
                async for line in resp.aiter_lines():
                    now = time.perf_counter()
                    if line.startswith("data:"):
                        data = line[5:].strip()
                        if data and data != "[DONE]":
                            _take_chunk(json.loads(data), now, choices, state)
        except httpx.TimeoutException as exc:
            return _failed(TIMEOUT, exc, send_s, choices, state)
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
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


def _failed(status: str, exc: Exception, send_s: float, choices, state) -> Reply:
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
