"""Issue 48: the built-in server's KV-event publisher under subscribers that misbehave.

A subscriber that never reads, one that connects and disconnects in a loop, and a flood of
requests while a subscriber lags: every request is still served, /health answers, the server logs
no traceback, and what a lagging subscriber does read arrives in order (ZMQ's PUB socket drops at
its high-water mark rather than block the engine thread).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zmq

from harness.builtin_server.server import free_port
from tests.serve_process import TINY, ServeProcess


@pytest.fixture(scope="module")
def server():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    args = ["engine=apc", *TINY, f"kv_events_endpoint={endpoint}"]
    with ServeProcess(args) as running:
        running.endpoint = endpoint
        yield running
    log = running.log()
    assert "Traceback" not in log and "Exception in" not in log, log


def subscriber(endpoint: str, ctx: zmq.Context) -> zmq.Socket:
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.RCVHWM, 1)  # the smallest queue: a slow reader backs up at once
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def serve_all(server, count: int, seed: int) -> list[int]:
    """`count` distinct prompts (each stores new blocks: one event batch each), 4 at a time."""
    rng = np.random.default_rng(seed)
    prompts = [[int(t) for t in rng.integers(5, 1000, 40)] for _ in range(count)]

    def one(prompt: list[int]) -> int:
        with server.client() as client:
            body = {"prompt": prompt, "max_tokens": 2}
            return client.post("/v1/completions", json=body).status_code

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, prompts))


def healthy(server) -> bool:
    with server.client(timeout_s=10) as client:
        return client.get("/health").status_code == 200


def test_a_subscriber_that_never_reads_holds_nothing_up(server):
    ctx = zmq.Context()
    try:
        idle = subscriber(server.endpoint, ctx)
        time.sleep(0.3)  # joined before the events flow
        assert serve_all(server, 40, seed=1) == [200] * 40
        assert healthy(server)
        idle.close()
    finally:
        ctx.term()


def test_subscribers_connecting_and_leaving_in_a_loop(server):
    ctx = zmq.Context()
    stop = threading.Event()

    def churn() -> int:
        rounds = 0
        while not stop.is_set():
            sub = subscriber(server.endpoint, ctx)
            time.sleep(0.005)
            sub.close()
            rounds += 1
        return rounds

    try:
        with ThreadPoolExecutor(1) as pool:
            rounds = pool.submit(churn)
            assert serve_all(server, 20, seed=2) == [200] * 20
            stop.set()
            assert rounds.result(timeout=30) > 10
        assert healthy(server)
    finally:
        ctx.term()


def test_a_flood_while_a_subscriber_lags_keeps_its_events_in_order(server):
    ctx = zmq.Context()
    try:
        slow = subscriber(server.endpoint, ctx)
        time.sleep(0.3)
        seqs: list[int] = []
        done = threading.Event()

        def lag() -> None:
            while not done.is_set() or slow.poll(200):
                if slow.poll(100):
                    _, seq, _ = slow.recv_multipart()
                    seqs.append(int.from_bytes(seq, "big", signed=True))
                    time.sleep(0.05)  # far slower than the engine publishes

        reader = threading.Thread(target=lag)
        reader.start()
        assert serve_all(server, 40, seed=3) == [200] * 40
        assert healthy(server)
        done.set()
        reader.join(60)
        slow.close()
        assert seqs, "the lagging subscriber read nothing"
        assert seqs == sorted(set(seqs)), seqs  # in order, none twice (some may be dropped)
    finally:
        ctx.term()
