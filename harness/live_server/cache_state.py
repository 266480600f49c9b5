"""A live server's prefix-cache state as the harness sees it: its Prometheus hit and query
counters (read settled, before and after the measured window) and the reset of its cache."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from harness.live_server import prometheus
from harness.live_server.flavours import Flavour
from harness.live_server.http_client import TRANSPORT_ERRORS, ServerClient


@dataclass
class Counters:
    hits: float | None
    queries: float | None


async def metric_samples(client: ServerClient) -> list[prometheus.Sample]:
    try:
        resp = await client.get("/metrics")
    except TRANSPORT_ERRORS:
        return []
    return prometheus.parse(resp.text) if resp.status_code == 200 else []


async def read_counters(client: ServerClient, flavour: Flavour) -> Counters:
    samples = await metric_samples(client)
    return Counters(
        prometheus.counter(samples, flavour.hit_counters),
        prometheus.counter(samples, flavour.query_counters),
    )


async def settled_counters(client: ServerClient, flavour: Flavour, wait_s: float = 3.0) -> Counters:
    """The counters once two reads 0.25 s apart agree: the engine publishes its statistics a
    moment after the last reply."""
    last = await read_counters(client, flavour)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = await read_counters(client, flavour)
        if now == last:
            return now
        last = now
    return last


async def reset_cache(client: ServerClient, flavour: Flavour) -> bool:
    if flavour.reset_path is None:
        return False
    try:
        resp = await client.post(flavour.reset_path)
    except TRANSPORT_ERRORS as exc:
        raise RuntimeError(f"cache reset failed: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise RuntimeError(
            f"POST {flavour.reset_path} answered HTTP {resp.status_code}: {resp.text[:200]} "
            "(vLLM needs VLLM_SERVER_DEV_MODE=1)"
        )
    return True
