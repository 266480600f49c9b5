"""A live server's prefix-cache state as the harness sees it: its Prometheus hit and query
counters (read settled, before and after the measured window) and the reset of its cache."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from harness.config.errors import BadInput
from harness.live_server import prometheus, replies
from harness.live_server.bounded import CAPS
from harness.live_server.flavours import Flavour
from harness.live_server.http_client import TRANSPORT_ERRORS, ServerClient
from harness.live_server.replies import BadReply

log = logging.getLogger("harness.live_server")


@dataclass
class Counters:
    hits: float | None
    queries: float | None
    steps: float | None = None  # engine steps (vLLM: its per-step histogram's count)
    preemptions: float | None = None
    problem: str | None = None  # why a counter the server shows is not used (replies.counter)
    external_hits: float | None = None  # a KV connector's hits (Flavour.external_hit_counters)


def why(exc: BaseException) -> str:
    """An exception as a short one-line reason."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


async def metric_samples(client: ServerClient) -> list[prometheus.Sample]:
    """/metrics's samples; none when it does not answer 200 within its cap."""
    try:
        resp = await client.get("/metrics", CAPS.metrics_bytes)
    except TRANSPORT_ERRORS as exc:
        log.warning("warning: GET /metrics: %s; the server's counters are not used", why(exc))
        return []
    return prometheus.parse(resp.text) if resp.status_code == 200 else []


async def read_counters(client: ServerClient, flavour: Flavour) -> Counters:
    """The server's counters now (`counters`)."""
    return counters(await metric_samples(client), flavour)


def counters(samples: list[prometheus.Sample], flavour: Flavour) -> Counters:
    """The hit, query, step and preemption counters in `samples`, each checked
    (replies.counter): one that is NaN, infinite or negative is not used, and the reason is
    kept. A counter the flavour names that is missing from a page showing the server's other
    metrics reads 0: a labelled Prometheus counter appears only at its first increment
    (SGLang's `cached_tokens_total` was missing before a run's first hit, so the run's delta was
    lost though the server counted 4,672)."""
    values, problems = [], []
    for names in (
        flavour.hit_counters,
        flavour.query_counters,
        flavour.step_counters,
        flavour.preemption_counters,
        flavour.external_hit_counters,
    ):
        try:
            found = prometheus.counter(samples, names)
            if found is None and names and _exports(samples, names[0]):
                found = 0.0
            values.append(replies.counter(found, names[0]) if names else found)
        except BadReply as exc:
            values.append(None)
            problems.append(str(exc))
    hits, queries, steps, preemptions, external = values
    return Counters(hits, queries, steps, preemptions, "; ".join(problems) or None, external)


def _exports(samples: list[prometheus.Sample], name: str) -> bool:
    """Whether the page shows metrics of `name`'s server ("sglang:", "vllm:")."""
    prefix = name.partition(":")[0] + ":"
    return any(s.name.startswith(prefix) for s in samples)


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


# SGLang answers a flush with HTTP 400 until its scheduler is idle (`is_fully_idle` in
# srt/managers/scheduler.py: its last batch processed), which a reset sent right after the
# warm-up's replies can beat (measured: 2 runs of 18 against the local CPU server): ask again.
RESET_TRIES, RESET_WAIT_S = 10, 0.5


async def reset_cache(client: ServerClient, flavour: Flavour) -> bool:
    if flavour.reset_path is None:
        return False
    for attempt in range(RESET_TRIES):
        try:
            resp = await client.post(flavour.reset_path)
        except TRANSPORT_ERRORS as exc:
            raise BadInput(f"server.url: the cache reset failed ({why(exc)})") from None
        if resp.status_code != 400 or attempt == RESET_TRIES - 1:
            break
        await asyncio.sleep(RESET_WAIT_S)
    if resp.status_code != 200:
        first = (resp.text.strip().splitlines() or [""])[0][:200]
        raise BadInput(
            f"server.url: POST {flavour.reset_path} answered HTTP {resp.status_code} {first!r}; "
            "vLLM needs VLLM_SERVER_DEV_MODE=1, or pass server.reset_cache=false"
        )
    return True
