"""Bounded time to receive a request: uvicorn's h11 protocol with a head and a body deadline.

uvicorn closes idle keep-alive connections but never times out a request being received: a
client sending its head or its body a byte at a time would hold a socket and a task for ever.
Here each request's head must arrive within `header_timeout_s` of the connection opening (or of
the previous response), and its body within `body_timeout_s` of the head, whichever route it
names and whether or not the route reads the body. A late head is closed; a late body gets 408
with vLLM's error body if no response was sent yet, and the connection is closed.

A body the route left unread (a 413, a route that takes none) is read and discarded, still
under the body deadline and up to `drain_max_bytes`, so a client that writes its whole body
before reading the reply gets the reply instead of a reset connection, while one declaring
gigabytes cannot keep the event loop discarding them for the whole deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from harness.builtin_server.protocol import ApiError

log = logging.getLogger(__name__)
TIMED_OUT = "prefixbench_body_timed_out"  # set in the request's scope state: no second log line


def deadline_protocol(
    header_timeout_s: float, body_timeout_s: float, drain_max_bytes: int
) -> type[H11Protocol]:
    """uvicorn's `http=` protocol class enforcing both deadlines and the discard bound."""

    class Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _discarded = 0  # bytes of the current request's body received after its reply

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._track()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if (
                cycle is not None
                and cycle.response_complete
                and self.conn.their_state is h11.SEND_BODY
            ):
                self._discarded += len(data)
                if self._discarded > drain_max_bytes:  # not worth reading on: the reply is out
                    self.transport.close()
                    return
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track()  # the next request's head starts now (or the unread body goes on)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head()
            self._cancel_body()
            super().connection_lost(exc)

        def _track(self) -> None:
            """Arm the deadline of the part of the request being received; cancel the other."""
            state = self.conn.their_state
            if state is h11.IDLE:
                self._cancel_body()
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(header_timeout_s, self._head_late)
            elif state is h11.SEND_BODY:
                self._cancel_head()
                if self._body_timer is None:
                    self._discarded = 0
                if self._body_timer is None:
                    self._body_timer = self.loop.call_later(body_timeout_s, self._body_late)
            else:  # the whole request arrived, or the connection is ending
                self._cancel_head()
                self._cancel_body()

        def _cancel_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _cancel_body(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def _body_late(self) -> None:
            self._body_timer = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_started:
                self._send_408()
                # The handler still waiting for the body now reads a disconnect and ends; the
                # cycle drops whatever it sends (it would otherwise write after our reply).
                cycle.scope["state"][TIMED_OUT] = True
                cycle.response_started = cycle.response_complete = cycle.disconnected = True
                cycle.message_event.set()
                log.warning(
                    "%s: the request body did not arrive within %g s (body_timeout_s): 408, "
                    "connection closed",
                    _peer(self.client),
                    body_timeout_s,
                )
            self.transport.close()

        def _send_408(self) -> None:
            message = f"the request body did not arrive within {body_timeout_s:g} s"
            body = json.dumps(ApiError(message, status=408).body(), separators=(",", ":"))
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ]
            for event in (
                h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"),
                h11.Data(data=body.encode()),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")

    return Protocol


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
