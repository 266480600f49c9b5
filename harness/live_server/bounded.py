"""Every byte the client reads from a server, bounded: a size cap per answer and per stream line.

A server that sends more than its cap is a bad answer (`TooLarge`), found while reading, never a
whole body held in memory first (a 1 GB /v1/models used to cost 2.4 GB). Time is bounded by the
session's timeouts (harness/live_server/http_client.py): connect, between two reads, whole request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Caps:
    """Bytes the client accepts per answer (after decompression). The stream caps fit a reply
    that echoes a max-length prompt's ids and its output ids with room to spare."""

    models_bytes: int = 4 * MIB  # GET /v1/models
    version_bytes: int = 64 * KIB  # GET /version, /server_info (vLLM)
    # SGLang's /get_server_info: ~37 KB at 0.5.23 with one scheduler, its resolved arguments
    # copied once more per data-parallel rank
    server_info_bytes: int = 1 * MIB
    metrics_bytes: int = 32 * MIB  # GET /metrics (histograms of many label sets)
    error_bytes: int = 64 * KIB  # an HTTP error body (only its message is kept)
    plain_bytes: int = 1 * MIB  # any other plain answer (a cache reset's)
    line_bytes: int = 8 * MIB  # one `data:` line of a completion stream
    stream_bytes: int = 64 * MIB  # one completion stream as a whole


CAPS = Caps()


class TooLarge(ValueError):
    """The server sent more than the cap for this answer."""


def _check_length(resp: aiohttp.ClientResponse, cap: int, what: str) -> None:
    length = resp.content_length
    if length is not None and length > cap:
        raise TooLarge(f"{what}: the server announced {length} bytes, more than the {cap} allowed")


async def read_body(resp: aiohttp.ClientResponse, cap: int, what: str) -> bytes:
    """The whole body, refused as soon as it passes `cap` bytes."""
    _check_length(resp, cap, what)
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(64 * KIB):
        if len(buf) + len(chunk) > cap:
            raise TooLarge(f"{what}: the answer is larger than the {cap} bytes allowed")
        buf += chunk
    return bytes(buf)


async def read_lines(
    resp: aiohttp.ClientResponse, line_cap: int, total_cap: int, what: str
) -> AsyncIterator[bytes]:
    """The body's lines (without their newline) as they arrive; a line longer than `line_cap`
    or a body longer than `total_cap` is refused while it streams in."""
    _check_length(resp, total_cap, what)
    pending = bytearray()
    total = 0
    async for chunk in resp.content.iter_any():
        total += len(chunk)
        if total > total_cap:
            raise TooLarge(f"{what}: the stream is longer than the {total_cap} bytes allowed")
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) >= 0:
            yield bytes(pending[start:end])
            start = end + 1
        del pending[:start]
        if len(pending) > line_cap:
            raise TooLarge(f"{what}: a stream line is longer than the {line_cap} bytes allowed")
    if pending:
        yield bytes(pending)
