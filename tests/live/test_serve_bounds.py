"""Issue 37 class 1 (server side): every byte read and every size is bounded before it is used.

A request body larger than `max_body_bytes` is refused with 413 (declared or streamed without a
length) and the server goes on; a KV capacity or vocabulary that would need more memory than the
machine has is refused by `python -m harness.builtin_server` before anything is allocated, in one line.
"""

from __future__ import annotations

import socket

import pytest

from tests.serve_process import (
    TINY,
    ServeProcess,
    assert_error_body,
    assert_one_error_line,
    run_serve,
)

LIMIT = 1 << 20  # max_body_bytes of the module's server


@pytest.fixture(scope="module")
def server():
    with ServeProcess([*TINY, f"max_body_bytes={LIMIT}"]) as running:
        yield running
    assert "Traceback" not in running.log(), running.log()


def test_a_declared_256_mb_body_is_refused_before_it_is_read(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = (
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {256 << 20}\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"prompt": [1, 2, 3], "padding": "')
        reply = read_until_closed(sock)
    assert reply.startswith("HTTP/1.1 413 "), reply
    assert '"type":"RequestTooLargeError"' in reply and "max_body_bytes" in reply


def read_until_closed(sock: socket.socket) -> str:
    """The reply: until its JSON body ends (the server goes on reading, and discarding, the body
    it refused until the body deadline, issue 48) or the connection closes."""
    data = b""
    while not data.endswith(b"}}") and (chunk := sock.recv(65536)):
        data += chunk
    return data.decode()


def test_a_chunked_body_over_the_limit_is_cut_off(server):
    def chunks():
        yield b'{"prompt": [1, 2, 3], "padding": "'
        for _ in range(8):  # 8 MiB in all, never read whole by the server
            yield b"x" * LIMIT

    with server.client() as client:
        reply = client.post("/v1/completions", content=chunks())
        assert_error_body(reply, 413)
        ok = client.post("/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
        assert ok.status_code == 200, ok.text


def test_a_body_at_the_limit_is_read(server):
    body = b'{"prompt": [1, 2, 3], "max_tokens": 2, "padding": "'
    body += b"x" * (LIMIT - len(body) - 2) + b'"}'
    assert len(body) == LIMIT
    with server.client() as client:
        assert client.post("/v1/completions", content=body).status_code == 200


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["engine.kv_capacity_tokens=1000000000"], "engine.kv_capacity_tokens: this server needs"),
        (["model.vocab_size=10000000000"], "model: this server needs an estimated"),
        (["model.vocab_size=1e10"], "model.vocab_size"),
        (["engine.max_num_seqs=1000000000"], "this server needs an estimated"),
    ],
)
def test_sizes_beyond_the_memory_are_refused_before_allocating(args, needle):
    assert_one_error_line(run_serve([*TINY, *args], timeout_s=60), needle)
