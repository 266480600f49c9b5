"""The run's KV-event stream keeps its tail when the server publishes it late.

Under load vLLM-CPU published the last steps of a README run more than 0.7 s after the replies,
and the subscriber, which stopped after 0.5 s of silence, lost them (two runs of 40 beside a CI
run: the twin was exact per request, its KV steps were not). Here a real ZMQ PUB socket stands
in for the server's publisher (vLLM's message layout): the second batch comes 1.5 s late, and
`wait_for` the run's own prompt blocks holds the stream open until it is there.
"""

from __future__ import annotations

import threading
import time

import msgpack  # type: ignore[import-untyped]
import pytest
import zmq

from harness.live_server.kv_events import Subscriber


def _message(seq: int, *events: dict) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big", signed=True), msgpack.packb([time.time(), list(events)])]


def _stored(*hashes: int) -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": list(hashes),
        "block_size": 2,
        "token_ids": list(range(2 * len(hashes))),
    }


def _join(pub: zmq.Socket, sub: Subscriber) -> None:
    """ZMQ's slow joiner: a PUB socket drops what it sends before the subscription reaches it,
    and a fixed sleep of 0.5 s was not enough beside a CI run (the first batch was lost). Send
    a lone clear until one arrives; the tests' own batches start with a clear, which resets
    what `wait_for` counts."""
    deadline = time.monotonic() + 30
    while not sub.batches:
        assert time.monotonic() < deadline, "the subscriber never joined the publisher"
        pub.send_multipart(_message(0, {"type": "AllBlocksCleared"}))
        time.sleep(0.05)


@pytest.fixture
def wired(tmp_path):
    """A PUB socket bound where a server's would be, and a Subscriber joined to it."""
    endpoint = f"ipc://{tmp_path}/kv.ipc"
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(endpoint)
    try:
        sub = Subscriber(endpoint)
        _join(pub, sub)
        yield pub, sub
        sub.stop(drain_s=0.0)
    finally:
        pub.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("first_s", [0.0, 0.5])
def test_the_subscriber_waits_for_the_runs_own_blocks(wired, first_s):
    """The second batch comes 1.5 s late; the first at once or 0.5 s late (none of the run's
    blocks seen yet when the wait starts: CI caught the reader a moment behind even at once)."""
    pub, sub = wired
    first = _message(1, {"type": "AllBlocksCleared"}, _stored(11, 12))
    timers = [
        threading.Timer(first_s, lambda: pub.send_multipart(first)),
        threading.Timer(1.5, lambda: pub.send_multipart(_message(2, _stored(13)))),
    ]
    for timer in timers:
        timer.start()
    try:
        assert sub.wait_for({11, 12, 13}, timeout_s=30.0) == 0
    finally:
        for timer in timers:  # never leave a timer to send on a socket the fixture closed
            timer.join()
    assert [b.stored for b in sub.batches if b.stored] == [(11, 12), (13,)]


def test_hashes_the_server_does_not_share_are_not_waited_for(wired):
    pub, sub = wired
    pub.send_multipart(_message(1, {"type": "AllBlocksCleared"}, _stored(11)))
    deadline = time.monotonic() + 10
    while not any(b.stored for b in sub.batches) and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    assert sub.wait_for({21, 22}, timeout_s=30.0) == 2  # none seen: another hash seed
    assert time.monotonic() - t0 < 30.0
