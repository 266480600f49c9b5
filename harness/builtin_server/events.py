"""What the engine thread tells a request's handler, and the queue that carries it.

The engine thread pushes a request's events (accepted, tokens of a step, done, failed) onto its
`RequestSink`, an asyncio queue on the event loop fed with `call_soon_threadsafe`; the handler
awaits them one by one (harness/builtin_server/engine_thread.py sends, app.py receives).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Accepted:
    child_ids: list[str]


@dataclass(frozen=True)
class SampleFinish:
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    host_cached_tokens: int = 0  # of cached_tokens, those a host tier supplied
    storage_cached_tokens: int = 0  # of cached_tokens, a storage tier's (not among the host's)


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
