"""Issue 37 class 8: the served engine's thread is supervised.

A step log on a full disk (/dev/full) fails each request whose step it could not record with a
500 and an error body, streamed or not, /health says why, /metrics keeps answering and shows no
request running forever, and the cache can be reset once the aborted requests are gone. An
exception inside a step (injected into the real engine of an in-process server) fails the
requests in flight, after which the server serves again; a step that keeps failing, or a thread
that dies, makes /health fail and every later request is refused at once, none hangs.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from harness.builtin_server.engine_thread import MAX_CRASHES
from harness.builtin_server.metrics import parse as parse_metrics
from harness.builtin_server.server import InProcessServer, compose_config, prepare
from tests.serve_process import TINY, ServeProcess, assert_error_body

BODY = {"prompt": [5, 6, 7, 8], "max_tokens": 4}


def settled(client: httpx.Client, timeout_s: float = 30) -> dict[str, float]:
    """/metrics once no request is running or waiting (fails after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reply = client.get("/metrics")
        assert reply.status_code == 200, reply.text
        values = parse_metrics(reply.text)
        idle = values["vllm:num_requests_running"] == values["vllm:num_requests_waiting"] == 0
        if idle or time.monotonic() > deadline:
            return values
        time.sleep(0.1)


# ---------------------------------------------------------------- the step log on a full disk


@pytest.fixture(scope="module")
def full_disk():
    with ServeProcess([*TINY, "step_log=/dev/full"]) as running:
        yield running


def test_a_step_log_on_a_full_disk_fails_the_request_with_500(full_disk):
    with full_disk.client(timeout_s=30) as client:
        error = assert_error_body(client.post("/v1/completions", json=BODY), 500)
        assert "step log could not be written: No space left on device" in error["message"]
        values = settled(client)
        assert values["vllm:num_requests_running"] == 0
        health = client.get("/health")
        assert health.status_code == 503 and "No space left on device" in health.text
        assert client.post("/reset_prefix_cache").status_code == 200  # no KV held any more


def test_a_stream_gets_an_error_event_and_done(full_disk):
    with full_disk.client(timeout_s=30) as client:
        body = {**BODY, "stream": True}
        with client.stream("POST", "/v1/completions", json=body) as reply:
            assert reply.status_code == 200
            data = [ln[6:] for ln in reply.iter_lines() if ln.startswith("data: ")]
        assert data[-1] == "[DONE]"
        assert json.loads(data[-2])["error"]["code"] == 500
        assert settled(client)["vllm:num_requests_running"] == 0


def test_every_request_is_answered_and_the_log_shows_no_traceback_loop(full_disk):
    with full_disk.client(timeout_s=30) as client:
        for _ in range(3):
            assert client.post("/v1/completions", json=BODY).status_code == 500
        assert client.get("/metrics").status_code == 200
    assert full_disk.proc is not None and full_disk.proc.poll() is None  # still serving


# ---------------------------------------------------------------- a step that raises (injected)


@pytest.fixture()
def server():
    cfg = compose_config(["engine=radix", *TINY])
    prepared = prepare(cfg)
    with InProcessServer(prepared) as running:
        yield running, prepared.thread.engine


def inject(engine, failures: int, exc: BaseException) -> None:
    """The engine's next `failures` steps raise `exc` (the real step runs after that)."""
    real = engine.step
    left = [failures]

    def step(*args, **kwargs):
        if left[0] > 0:
            left[0] -= 1
            raise exc
        return real(*args, **kwargs)

    engine.step = step


def test_an_exception_in_a_step_fails_its_requests_and_serving_goes_on(server):
    running, engine = server
    with httpx.Client(base_url=running.url, timeout=30) as client:
        inject(engine, 1, RuntimeError("injected"))
        error = assert_error_body(client.post("/v1/completions", json=BODY), 500)
        assert "RuntimeError: injected" in error["message"]
        assert client.get("/health").status_code == 200
        assert client.post("/v1/completions", json=BODY).status_code == 200
        assert settled(client)["vllm:num_requests_running"] == 0
        assert client.post("/reset_prefix_cache").status_code == 200


def test_a_step_that_keeps_failing_makes_health_fail(server):
    running, engine = server
    with httpx.Client(base_url=running.url, timeout=30) as client:
        inject(engine, 10**6, RuntimeError("broken"))
        for _ in range(MAX_CRASHES):
            assert_error_body(client.post("/v1/completions", json=BODY), 500)
        health = client.get("/health")
        assert health.status_code == 503 and "RuntimeError: broken" in health.text
        assert_error_body(client.post("/v1/completions", json=BODY), 503)
        assert client.get("/metrics").status_code == 200


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_engine_thread_is_never_silent(server):
    running, engine = server
    with httpx.Client(base_url=running.url, timeout=30) as client:
        inject(engine, 1, SystemExit(3))  # a BaseException ends the thread's loop
        assert_error_body(client.post("/v1/completions", json=BODY), 503)
        assert client.get("/health").status_code == 503
        assert_error_body(client.post("/v1/completions", json=BODY), 503)
        assert_error_body(client.get("/metrics"), 500)
        assert_error_body(client.post("/reset_prefix_cache"), 500)
