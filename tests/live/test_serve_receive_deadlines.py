"""Issue 48 classes 1-3: the built-in server bounds the time to receive a request, answers a body
over the cap with 413 and a JSON error a client can read, and logs a client that leaves mid-request
in one line.

A head or body trickled to any route (one that reads the body or not) is cut off after
`header_timeout_s` / `body_timeout_s`; a body over `max_body_bytes` is read and discarded, so a
client that writes all of it before reading gets the 413 instead of a reset connection.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.serve_process import TINY, ServeProcess, assert_error_body

LIMIT = 1 << 20  # max_body_bytes of the module's server
TIMEOUT_S = 2  # header_timeout_s and body_timeout_s of the module's server


@pytest.fixture(scope="module")
def server():
    args = [*TINY, f"max_body_bytes={LIMIT}", f"header_timeout_s={TIMEOUT_S}"]
    with ServeProcess([*args, f"body_timeout_s={TIMEOUT_S}"]) as running:
        yield running
    log = running.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


def head(method: str, path: str, length: int) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def seconds_until_closed(port: int, first: bytes, limit_s: float = 15) -> float:
    """Send `first`, then a byte every 0.25 s until the server closes: the seconds it took."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(first)
        sock.settimeout(0.25)
        while time.monotonic() - start < limit_s:
            try:
                if sock.recv(65536) == b"":
                    break
            except TimeoutError:
                pass
            except OSError:  # reset: closed with our bytes unread
                break
            try:
                sock.sendall(b" ")
            except OSError:
                break
    return time.monotonic() - start


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/completions"),
        ("POST", "/reset_prefix_cache"),  # answers without reading the body
        ("GET", "/health"),
        ("POST", "/no/such/route"),
    ],
)
def test_a_trickled_body_is_cut_off_on_every_route(server, method, path):
    took = seconds_until_closed(server.port, head(method, path, 10_000))
    assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 5, took  # 10,000 bytes at 4/s: 40 min


def test_a_trickled_head_is_cut_off(server):
    took = seconds_until_closed(server.port, b"POST /v1/completions HTTP/1.1\r\nX-Slow: ")
    assert TIMEOUT_S - 0.5 < took < TIMEOUT_S + 5, took


def read_reply(sock: socket.socket) -> tuple[int, dict]:
    """One HTTP/1.1 reply with a Content-Length: its status and JSON body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", top).group(1))  # type: ignore[union-attr]
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, rest
        rest += chunk
    return int(top.split()[1]), json.loads(rest[:length])


@pytest.mark.parametrize("size", [LIMIT + 1, 16 * LIMIT])
def test_a_client_that_writes_its_whole_oversized_body_first_reads_413(server, size):
    # 16 MiB is far more than the socket buffers hold: without the server reading the rest, the
    # sendall would fail on a reset connection before the reply could be read.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head("POST", "/v1/completions", size) + b"x" * size)
        status, body = read_reply(sock)
        assert status == 413 and body["error"]["type"] == "RequestTooLargeError", body
        assert "max_body_bytes" in body["error"]["message"]
        # The connection goes on: the next request on it is answered.
        ok = b'{"prompt": [1, 2, 3], "max_tokens": 2}'
        sock.sendall(head("POST", "/v1/completions", len(ok)) + ok)
        status, body = read_reply(sock)
        assert status == 200 and body["choices"], body


def test_an_oversized_body_through_httpx_is_413(server):
    with server.client() as client:
        assert_error_body(client.post("/v1/completions", content=b"{" * (4 * LIMIT)), 413)

        def chunks():
            for _ in range(4):
                yield b" " * LIMIT

        assert_error_body(client.post("/v1/completions", content=chunks()), 413)


def test_a_client_leaving_mid_body_is_one_log_line(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head("POST", "/v1/completions", 1000) + b'{"prompt": [1, 2')
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while "disconnected before its request" not in server.log():
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.1)
    lines = [line for line in server.log().splitlines() if "disconnected before" in line]
    assert len(lines) == 1 and "/v1/completions" in lines[0], lines
    with server.client() as client:
        assert client.get("/health").status_code == 200


def test_a_gigabyte_declared_body_is_not_discarded_for_ever(server):
    """The 413 comes at once; the refused body is then discarded up to 64 MiB (4x this server's
    cap, at least 64 MiB) and the connection closed: a client cannot keep the loop busy."""
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head("POST", "/v1/completions", 1 << 30))
        status, body = read_reply(sock)
        assert status == 413, body
        chunk = b"x" * (1 << 20)
        try:
            while sent < 512 << 20:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:  # closed by the server
            pass
    assert 64 << 20 <= sent < 256 << 20, sent >> 20
