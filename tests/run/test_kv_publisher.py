"""The built-in apc server publishes vLLM's KV-cache events (harness/builtin_server/kv_publisher.py).

A served engine with `kv_events_endpoint` is read by the project's own subscriber, the one the
live-server twin uses on vLLM (harness/live_server/kv_events.py): each step's stored blocks carry
the hashes the apc cache keys them by and the prompt's tokens, evictions arrive as BlockRemoved,
and a cache reset as AllBlocksCleared at the head of the next step's batch (the apc event log
itself: tests/unit/test_apc_kv_events.py). vllm-router reads the same stream in
tests/live/test_fleet_real.py.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from harness.builtin_server.kv_publisher import KvEventPublisher, check_endpoint
from harness.builtin_server.server import InProcessServer, compose_config, prepare
from harness.config.errors import BadInput
from harness.live_server.kv_events import Subscriber, since_last_clear
from harness.live_server.steplock import prompt_hashes
from workloads.request import Request

TINY = ["model=tiny", "device=cpu", "engine.backend=torch"]
BLOCK = 16


def _wait(sub: Subscriber, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(sub.batches) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def _join(sub: Subscriber, client: httpx.Client) -> None:
    """ZMQ's slow joiner: a SUB socket misses what is sent before its subscription reaches the
    publisher, and a fixed sleep can be too short on a loaded machine. Serve throwaway prompts
    until one's blocks arrive, then reset the cache, so the test's own steps start clean (the
    reset heads the next step's batch)."""
    for seed in range(100, 400):
        body = {"prompt": _prompt(seed, BLOCK + 1), "max_tokens": 1, "temperature": 0.0}
        assert client.post("/v1/completions", json=body).status_code == 200
        _wait(sub, 1, timeout_s=0.5)
        if sub.batches:
            assert client.post("/reset_prefix_cache").status_code == 200
            return
    raise AssertionError("the subscriber never joined the server's publisher")


def _prompt(seed: int, length: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(5, 1000, length)]


def test_the_served_cache_publishes_what_it_stores_evicts_and_clears(tmp_path):
    endpoint = f"ipc://{tmp_path}/kv.sock"
    cfg = compose_config(
        ["engine=apc", *TINY, "engine.kv_capacity_tokens=256", f"kv_events_endpoint={endpoint}"]
    )
    with InProcessServer(prepare(cfg)) as server:
        sub = Subscriber(endpoint)
        client = httpx.Client(base_url=server.url, timeout=60)
        _join(sub, client)
        first = _prompt(1, 5 * BLOCK + 3)
        body = {"prompt": first, "max_tokens": 2, "temperature": 0.0}
        assert client.post("/v1/completions", json=body).status_code == 200
        deadline = time.monotonic() + 30
        while not any(b.cleared for b in sub.batches) and time.monotonic() < deadline:
            time.sleep(0.05)
        own = since_last_clear(sub.batches)  # the reset heads the first measured step's batch
        assert own and own[0].cleared
        stored = [h for b in own for h in b.stored]
        request = Request("r", tuple(first), 2)
        assert stored == prompt_hashes(request, BLOCK)  # the cache's own keys, in order
        assert own[0].stored_tokens[0] == tuple(first[:BLOCK])
        # Other prompts fill the 15-block pool: the first prompt's blocks are evicted.
        for seed in (2, 3, 4):
            other = {"prompt": _prompt(seed, 6 * BLOCK), "max_tokens": 2, "temperature": 0.0}
            assert client.post("/v1/completions", json=other).status_code == 200
        assert client.post("/reset_prefix_cache").status_code == 200
        assert client.post("/v1/completions", json=body).status_code == 200
        time.sleep(0.5)
        batches = sub.stop()
    removed = {h for b in batches for h in b.removed}
    assert set(stored) <= removed  # evicted before the reset
    assert batches[-1].cleared and batches[-1].stored == tuple(stored)  # reset, then stored again
    assert sub.errors == [] and sub.lost == 0


def test_endpoints_are_loopback_and_the_radix_cache_publishes_none(tmp_path):
    check_endpoint("tcp://127.0.0.1:5557")
    check_endpoint(f"ipc://{tmp_path}/x")
    for bad in ("tcp://0.0.0.0:5557", "tcp://127.0.0.1:http", "5557", "tcp://127.0.0.1:0"):
        with pytest.raises(BadInput, match="kv_events_endpoint"):
            check_endpoint(bad)
    with pytest.raises(BadInput, match="apc cache"):
        compose_config(["engine=radix", *TINY, f"kv_events_endpoint=ipc://{tmp_path}/y"])
    publisher = KvEventPublisher(f"ipc://{tmp_path}/z")
    publisher.publish([])  # a step that changed nothing sends nothing
    assert publisher.seq == 0
    publisher.close()
