"""The async HTTP client: one pooled aiohttp session, streamed completions timed per chunk.

Every chunk's arrival is read on `time.perf_counter()` (monotonic) the moment its line is
parsed; a chunk's tokens share that time. A failure is a `Reply` with a status, the HTTP code
and the server's message, never an exception: refused connections, HTTP errors, a stream cut
mid-way or ended without its `[DONE]` (what was received is kept), timeouts, and answers that
fail the checks of harness/live_server/replies.py (`bad_reply`) alike. Every read is capped in
bytes (harness/live_server/bounded.py) and in time (connect, between two reads, the whole
request). aiohttp, not httpx: its cost per request here is a fraction of httpx's, which is what
the client's send lag at high rates needs (scripts/bench_client.py). Nothing outside this module sees the library: `Response` and
`TRANSPORT_ERRORS` are what the target reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp

from harness.live_server import replies
from harness.live_server.bounded import CAPS, TooLarge, read_body, read_lines
from harness.live_server.config import ServerConfig
from harness.live_server.replies import BadReply

OK, HTTP_ERROR, FAILED, TIMEOUT, BAD_REPLY = "ok", "http_error", "failed", "timeout", "bad_reply"
DONE = b"[DONE]"
# Reuse an idle connection only this long: vLLM's and SGLang's uvicorn close one after 5 s, and
# between two stages the event loop is not running to see that close, so a connection idle past
# it (the tokenizer loads between discovery and the warm-up) failed the next POST with "Can not
# write request body". aiohttp checks the age when it hands a pooled connection out.
KEEPALIVE_S = 4.0


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
    status: str  # ok | http_error | failed | timeout | bad_reply
    http_status: int | None
    error: str | None
    send_s: float  # perf_counter when the request was handed to the client
    finish_s: float  # perf_counter of the last byte (or of the failure)
    choices: tuple[ChoiceOut, ...]
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    host_cached_tokens: int | None = None  # of cached_tokens, a host tier's (None: not reported)
    storage_cached_tokens: int | None = None  # of cached_tokens, a storage tier's (None: not said)
    prompt_token_ids: tuple[int, ...] | None = None  # as the server read the prompt
    # the stream's first `system_fingerprint`: a built-in worker's tag (worker_tag), what a
    # real router's fleet reads the serving worker from (harness/routers/fleet.py)
    system_fingerprint: str | None = None


@dataclass(frozen=True)
class Response:
    """A plain (non-streamed) reply."""

    status_code: int
    text: str
    what: str = "answer"  # "GET /v1/models": what a bad body is reported as

    def json(self) -> object:
        """The body as strict JSON; BadReply (a ValueError) when it is not."""
        return replies.parse_json(self.text, self.what)


# What a request can raise when the server is away, slow or broken (the target catches these).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    OSError,
    TooLarge,
)


class ServerClient:
    """Connection reuse for every request of a run; call `aclose()` when done. The session is
    made on first use, inside the running event loop."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self._session: aiohttp.ClientSession | None = None

    def _timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        # sock_read: a server that sends no byte (no headers, no next chunk) for read_timeout_s
        # is given up on, whatever the whole request's limit.
        return aiohttp.ClientTimeout(
            total=total_s,
            sock_connect=self.cfg.connect_timeout_s,
            sock_read=min(self.cfg.read_timeout_s, total_s),
        )

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=0,  # no client-side cap
                limit_per_host=0,
                keepalive_timeout=KEEPALIVE_S,
            )
            self._session = aiohttp.ClientSession(
                base_url=self.cfg.base_url + "/",
                timeout=self._timeout(self.cfg.request_timeout_s),
                connector=connector,
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str, cap: int, timeout_s: float | None = None) -> Response:
        """GET `path`, its body refused past `cap` bytes (TooLarge, one of TRANSPORT_ERRORS)."""
        return await self._plain("GET", path, cap, timeout_s or self.cfg.connect_timeout_s)

    async def post(self, path: str, timeout_s: float | None = None) -> Response:
        return await self._plain(
            "POST", path, CAPS.plain_bytes, timeout_s or self.cfg.request_timeout_s
        )

    async def _plain(self, method: str, path: str, cap: int, timeout_s: float) -> Response:
        what = f"{method} /{path.lstrip('/')}"
        timeout = self._timeout(timeout_s)
        async with self._http().request(method, path.lstrip("/"), timeout=timeout) as resp:
            data = await read_body(resp, cap, what)
            return Response(resp.status, data.decode("utf-8", errors="replace"), what)

    async def complete(
        self,
        body: Mapping[str, object],
        num_choices: int,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """POST /v1/completions with `stream: true` and read the reply chunk by chunk;
        `headers`: more request headers (a router's X-Session-ID)."""
        choices = tuple(ChoiceOut() for _ in range(num_choices))
        sent = _Sent(_int_field(body, "max_tokens"), _prompt_len(body), num_choices)
        state: dict[str, object] = {}
        send_s = time.perf_counter()
        try:
            async with self._http().post("v1/completions", json=body, headers=headers) as resp:
                if resp.status >= 400:
                    text = await _error_text(resp)
                    return Reply(
                        HTTP_ERROR, resp.status, _message(text), send_s,
                        time.perf_counter(), choices,
                    )  # fmt: skip
                done = await _read_stream(resp, choices, state, sent)
        except asyncio.TimeoutError as exc:
            return _failed(TIMEOUT, exc, send_s, choices, state)
        except (BadReply, TooLarge) as exc:
            return _reply(BAD_REPLY, 200, f"bad reply: {exc}", send_s, time.perf_counter(),
                          choices, {})  # fmt: skip
        except (aiohttp.ClientError, OSError) as exc:
            return _failed(FAILED, exc, send_s, choices, state)
        if not done:
            return _reply(FAILED, 200, "the stream ended without its [DONE] terminator", send_s,
                          time.perf_counter(), choices, state)  # fmt: skip
        try:
            state["usage"] = (
                replies.usage(
                    state["usage"],
                    sent.prompt_len,
                    sent.max_tokens,
                    num_choices,
                    state.get("sglext"),
                )  # fmt: skip
                if "usage" in state
                else None
            )
        except BadReply as exc:
            return _reply(BAD_REPLY, 200, f"bad reply: {exc}", send_s, time.perf_counter(),
                          choices, {})  # fmt: skip
        return _reply(OK, 200, None, send_s, time.perf_counter(), choices, state)


@dataclass(frozen=True)
class _Sent:
    """What a reply is checked against."""

    max_tokens: int
    prompt_len: int
    num_choices: int


def _int_field(body: Mapping[str, object], name: str) -> int:
    value = body.get(name)
    return value if isinstance(value, int) else replies.MAX_TOKENS_PER_REPLY


def _prompt_len(body: Mapping[str, object]) -> int:
    prompt = body.get("prompt")
    return len(prompt) if isinstance(prompt, list) else replies.MAX_TOKENS_PER_REPLY


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    """The first error_bytes of an error body (the message is all that is kept)."""
    data = await resp.content.read(CAPS.error_bytes)
    return data.decode("utf-8", errors="replace")


async def _read_stream(resp, choices: tuple[ChoiceOut, ...], state: dict, sent: _Sent) -> bool:
    """Take every `data:` line of the stream; True when it ended with its [DONE]."""
    async for raw in read_lines(resp, CAPS.line_bytes, CAPS.stream_bytes, "the completion stream"):
        now = time.perf_counter()
        if not raw.startswith(b"data:"):
            continue
        data = raw[5:].strip()
        if data == DONE:
            return True
        if data:
            _take_chunk(replies.parse_json(data, "a stream chunk"), now, choices, state, sent)
    return False


def _take_chunk(
    chunk: object, now: float, choices: tuple[ChoiceOut, ...], state: dict, sent: _Sent
) -> None:
    chunk = replies.obj(chunk, "a stream chunk")
    if chunk.get("usage"):
        state["usage"] = chunk["usage"]  # checked once the stream is complete
    if chunk.get("system_fingerprint") and "system_fingerprint" not in state:
        state["system_fingerprint"] = str(chunk["system_fingerprint"])[:100]
    if chunk.get("sglext"):  # SGLang's extensions (cached tokens per tier), checked with usage
        state["sglext"] = chunk["sglext"]
    if "error" in chunk:  # an error event inside the stream (e.g. the engine died)
        state["error"] = _message(json.dumps(chunk))
    found = chunk.get("choices") or []
    if not isinstance(found, list):
        raise BadReply(f"choices must be a list, got {type(found).__name__}")
    for c in found:
        c = replies.obj(c, "choices[]")
        index = replies.choice_index(c.get("index"), len(choices))
        out = choices[index]
        if c.get("prompt_token_ids") and "prompt_token_ids" not in state:
            state["prompt_token_ids"] = tuple(
                replies.token_ids(c["prompt_token_ids"], "choices[].prompt_token_ids")
            )
        ids = replies.token_ids(c["token_ids"], "choices[].token_ids") if c.get("token_ids") else []
        text = c.get("text") or ""
        if not isinstance(text, str):
            raise BadReply(f"choices[].text must be a string, got {type(text).__name__}")
        out.text += text
        if ids:
            out.ids_reported = True
            out.token_ids.extend(ids)
            out.token_times_s.extend([now] * len(ids))
        elif text and not out.ids_reported:
            out.token_times_s.append(now)  # a text-only server: one chunk taken as one token
        num_out = len(out.token_ids) if out.ids_reported else len(out.token_times_s)
        replies.check_output_len(num_out, sent.max_tokens, index)
        if len(out.text) > CAPS.stream_bytes:
            raise BadReply("the reply's text is longer than the stream cap")
        reason = c.get("finish_reason")
        if reason:
            out.finish_reason = str(reason)[:100]


def _reply(status, code, error, send_s, finish_s, choices, state) -> Reply:
    """A Reply from what the stream gave; `state["usage"]` is a checked replies.Usage or absent
    (a failed stream's raw usage is not used)."""
    usage = state.get("usage")
    if not isinstance(usage, replies.Usage):
        usage = replies.Usage(None, None, None)
    if state.get("error") and status == OK:
        status, error = FAILED, state["error"]
    return Reply(
        status=status,
        http_status=code,
        error=error,
        send_s=send_s,
        finish_s=finish_s,
        choices=choices,
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=usage.cached_tokens,
        completion_tokens=usage.completion_tokens,
        host_cached_tokens=usage.host_cached_tokens,
        storage_cached_tokens=usage.storage_cached_tokens,
        prompt_token_ids=state.get("prompt_token_ids"),
        system_fingerprint=state.get("system_fingerprint"),
    )


def _failed(status: str, exc: BaseException, send_s: float, choices, state) -> Reply:
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return _reply(status, None, message, send_s, time.perf_counter(), choices, state)


def _message(text: str) -> str:
    """The server's error message from a JSON error body, else the body's first line."""
    try:
        body = replies.parse_json(text, "an error body")
    except BadReply:
        return (text.strip().splitlines() or ["(empty body)"])[0][:500]
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return str(err).strip().splitlines()[0][:500] if str(err).strip() else "(empty error)"
