"""Streamed completions through a router: each wave's requests sent at once with `stream: true`,
read chunk by chunk by the live-server client (harness/live_server/http_client.py), so a reply
keeps its first-token time, every token's time, its usage and the worker that served it
(`system_fingerprint`, in every chunk of a built-in worker's stream, which both routers pass on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from harness.fleet.policies import Routed
from harness.live_server.config import ServerConfig
from harness.live_server.http_client import OK, Reply, ServerClient
from harness.routers.faults import FleetFault

TIMEOUT_S = 120.0  # one routed request, first byte to last (the limit before streaming)


@dataclass(frozen=True)
class Streamed:
    """One routed reply: the client's Reply and the request's max_tokens."""

    reply: Reply
    max_tokens: int

    @property
    def token_times_s(self) -> tuple[float, ...]:
        """Each output token's arrival (perf_counter), one sample per request."""
        return tuple(self.reply.choices[0].token_times_s)

    @property
    def output_tokens(self) -> int:
        """The usage's count, else the tokens received."""
        done = self.reply.completion_tokens
        return done if done is not None else len(self.token_times_s)


def completion_body(
    model: str, req: Routed, max_tokens: int, token_ids: bool = True
) -> dict[str, object]:
    """Greedy, streamed with usage; `token_ids`: with each chunk's token ids, so that each token
    has its own time (a text-only chunk can hold no text while the detokenizer waits for the
    rest of a character, and the client then counts no token)."""
    prompt = req.prompt if isinstance(req.prompt, str) else list(req.prompt)
    body: dict[str, object] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if token_ids:
        body["return_token_ids"] = True
    return body


class RouterClient:
    """One event loop and one pooled client for a whole drive; `close()` when done.
    `token_ids`: ask for each chunk's token ids (completion_body)."""

    def __init__(self, router_url: str, token_ids: bool = True) -> None:
        cfg = ServerConfig(url=router_url, request_timeout_s=TIMEOUT_S, read_timeout_s=TIMEOUT_S)
        self._loop = asyncio.new_event_loop()
        self._client = ServerClient(cfg)
        self.token_ids = token_ids

    def wave(self, model: str, wave: Sequence[Routed], max_tokens: Sequence[int]) -> list[Streamed]:
        """Send the wave's requests at once; their replies in send order. A reply that failed
        (HTTP error, cut stream, bad chunk, timeout) is a FleetFault naming it."""

        async def one(req: Routed, tokens: int) -> Streamed:
            headers = {"X-Session-ID": req.session_id} if req.session_id else None
            body = completion_body(model, req, tokens, self.token_ids)
            return Streamed(await self._client.complete(body, 1, headers), tokens)

        async def every() -> list[Streamed]:
            return list(await asyncio.gather(*(one(r, n) for r, n in zip(wave, max_tokens))))

        out = self._loop.run_until_complete(every())
        for req, got in zip(wave, out):
            if got.reply.status != OK:
                code = f" {got.reply.http_status}" if got.reply.http_status else ""
                raise FleetFault(
                    f"request {req.request_id} through the router: {got.reply.status}{code}: "
                    f"{got.reply.error}"
                )
        return out

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._client.aclose())
        finally:
            self._loop.close()
