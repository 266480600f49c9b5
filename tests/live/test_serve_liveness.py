"""Issue 37 class 2 (server side): no client holds the server up.

A 20 MB text prompt (refused from its length, never tokenised) and a 400 kB one (tokenised on a
worker thread) leave /health answering at once; a request head or body sent a byte at a time is
cut off after `header_timeout_s` / `body_timeout_s` (408 for a body), and the server goes on.
"""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from tests.serve_process import TEXT, ServeProcess, assert_error_body

TIMEOUT_S = 2  # header_timeout_s and body_timeout_s of the module's server
HEALTH_S = 10  # /health must answer within this while a large prompt is handled (was 163 s)


@pytest.fixture(scope="module")
def server():
    args = ["engine=radix", *TEXT, f"header_timeout_s={TIMEOUT_S}", f"body_timeout_s={TIMEOUT_S}"]
    with ServeProcess(args) as running:
        yield running
    assert "Traceback" not in running.log(), running.log()


def health_while(server, body: dict) -> tuple[httpx.Response, list[int]]:
    """Post `body`; meanwhile poll /health (each answer within HEALTH_S): the reply and the
    /health statuses seen while the request was in flight."""
    reply: list[httpx.Response] = []

    def send() -> None:
        with server.client(timeout_s=300) as client:
            reply.append(client.post("/v1/completions", json=body))

    sender = threading.Thread(target=send)
    sender.start()
    statuses = []
    with server.client(timeout_s=HEALTH_S) as client:
        while sender.is_alive():
            statuses.append(client.get("/health").status_code)  # ReadTimeout fails the test
            time.sleep(0.05)
    sender.join()
    return reply[0], statuses


def test_a_20_mb_text_prompt_is_refused_and_health_answers(server):
    text = "The quick brown fox jumps over the lazy dog. " * 450_000  # ~20 MB
    reply, statuses = health_while(server, {"prompt": text, "max_tokens": 4})
    error = assert_error_body(reply, 400, "prompt")
    assert "maximum context length" in error["message"]
    assert set(statuses) <= {200}


def test_a_prompt_that_must_be_tokenised_leaves_health_answering(server):
    text = "lorem ipsum dolor sit amet " * 15_000  # ~400 kB: under the length bound, too long
    reply, statuses = health_while(server, {"prompt": text, "max_tokens": 4})
    assert_error_body(reply, 400, "prompt")
    assert set(statuses) <= {200}


def trickle(server, head: bytes, then: bytes) -> tuple[str, int]:
    """Send `head`, then `then` a byte every 0.2 s until the server answers or closes: what it
    sent back, and how many bytes of `then` went out before it closed."""
    sent = 0
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head)
        sock.settimeout(0.2)
        try:
            for byte in then:
                try:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                except TimeoutError:
                    pass
                sock.sendall(bytes([byte]))
                sent += 1
            sock.settimeout(10)
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:  # closed by the server (a reset: it left our bytes unread)
            pass
    return received.decode(errors="replace"), sent


def test_a_body_sent_a_byte_at_a_time_is_timed_out(server):
    body = b'{"prompt": [1, 2, 3], "max_tokens": 2, "padding": "' + b"x" * 200 + b'"}'
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    received, sent = trickle(server, head, body)  # 250 bytes at 5/s would take 50 s
    assert sent < len(body)  # cut off before the body was whole
    if received:  # the 408 arrives unless the close reset the connection first
        assert received.startswith("HTTP/1.1 408 "), received
        assert "RequestTimeoutError" in received and "did not arrive within 2 s" in received


def test_a_head_sent_a_byte_at_a_time_is_cut_off(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"y" * 300
    received, sent = trickle(server, b"", head)  # 340 bytes at 5/s would take 68 s
    assert received == "" and sent < len(head)  # closed, unanswered: there was no request


def test_an_idle_connection_is_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        assert sock.recv(65536) == b""  # closed by the server (a timeout would raise)


def test_the_server_serves_after_the_slow_clients(server):
    with server.client() as client:
        reply = client.post("/v1/completions", json={"prompt": "Hi there", "max_tokens": 2})
        assert reply.status_code == 200, reply.text
