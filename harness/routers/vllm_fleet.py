"""Real routers in front of real vLLM-CPU workers: `python -m harness.routers.vllm_fleet`.

N vLLM-CPU servers (the launcher of harness/live_server/launch.py; one served model name, so a
router may send a request to any of them; each publishing its KV-cache events through a loopback
relay) behind sglang-router or vllm-router (harness/routers/fleet.py starts it), driven one
request at a time with the routing twin, as docs/fleet.md §5 does over built-in servers. vLLM says
nothing in a reply about which server made it (`system_fingerprint` is null), so the worker is
read from outside: each server's `vllm:request_success_total` before and after the request; the
one that moved served it. That needs one request in flight at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from harness.config.errors import BadInput
from harness.config.footprint import GIB
from harness.config.processes import VLLM_CPU_BASE_BYTES
from harness.fleet.config import FleetConfig
from harness.live_server import prometheus
from harness.live_server.http_client import Reply
from harness.live_server.launch import VllmLaunch, missing, start_vllm, stop
from harness.routers.cli import check_fleet_args, result_lines
from harness.routers.faults import FleetFault
from harness.routers.fleet import (
    ROUTER_KINDS,
    TWINNED,
    Decision,
    Workers,
    route_through,
    router_available,
    routers_venv,
    run_files,
    streams,
)

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


NUM_GPU_BLOCKS = 257  # 256 usable blocks of 32 tokens per worker (8,192 KV tokens): no eviction


@contextlib.contextmanager
def vllm_fleet(num_workers: int, out_dir: Path) -> Iterator[Workers]:
    """N vLLM-CPU servers sharing one served name, started one after another (each start takes
    the two cores for a minute or two), every one stopped by its PID on exit."""
    problem = missing()
    if problem:
        raise BadInput(problem)
    relays = [EventRelay() for _ in range(num_workers)]
    nonce = VllmLaunch().nonce  # one served name for all: a router may send any request anywhere
    launches = [
        VllmLaunch(
            port=0,  # each picked when its start begins, not minutes before
            nonce=nonce,
            num_gpu_blocks=NUM_GPU_BLOCKS,
            kv_events_endpoint=relay.inbound,
            kv_events_topic="",  # vllm-router drops messages under any other topic
            log_path=out_dir / "logs" / f"vllm-w{i}.log",
        )
        for i, relay in enumerate(relays)
    ]
    started = []
    try:
        for launch in launches:
            started.append(start_vllm(launch))
        order = sorted(range(num_workers), key=lambda i: started[i].url)  # worker i: URL order
        urls = [started[i].url for i in order]
        events = [relays[i].outbound for i in order]
        yield Workers(
            urls, events, block_size=launches[0].block_size, served_by=SuccessCounters(urls)
        )
    finally:
        for s in started:
            stop(s.process)
        for relay in relays:
            relay.close()


class SuccessCounters:
    """The worker that answered the last request: the one whose success counter moved."""

    one_at_a_time = True

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.last = [0.0] * len(urls)

    def before(self) -> None:
        self.last = [_successes(url) for url in self.urls]

    def after(self, reply: Reply) -> int:
        now = [_successes(url) for url in self.urls]
        moved = [i for i, (a, b) in enumerate(zip(self.last, now)) if b > a]
        if len(moved) != 1:
            raise RuntimeError(
                f"one worker should have served the request; counters moved on {moved}"
            )
        return moved[0]


def _successes(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return prometheus.counter(prometheus.parse(text), [SUCCESS]) or 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.routers.vllm_fleet", description=__doc__
    )
    parser.add_argument("--router", choices=ROUTER_KINDS, default="vllm")
    parser.add_argument("--policy", default="kv_aware")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--per-group", type=int, default=6)
    parser.add_argument("--out", default="results/fleet-vllm")
    args = parser.parse_args(argv)
    try:
        server_bytes = VLLM_CPU_BASE_BYTES + VllmLaunch().kv_space_gib * GIB
        check_fleet_args(args, TWINNED, "vLLM-CPU server", server_bytes)
        cfg = FleetConfig(replicas=args.workers, router=args.policy)
        cfg.validate()
        if not router_available(args.router):
            raise BadInput(
                f"{args.router}-router is not installed in {routers_venv()}: run bash scripts/setup_routers.sh"
            )
        out = Path(args.out) / f"{args.router}-{args.policy}-x{args.workers}"
        stream, warm = streams(cfg.router, args.groups, args.per_group, args.workers)
        with vllm_fleet(args.workers, out) as workers:
            decisions = route_through(args.router, cfg, workers, stream, out, warm)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FleetFault, TimeoutError) as exc:  # the router's process failed; all are stopped
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _write(out / "decisions.csv", decisions)
    title = f"{args.router}-router {args.policy} over {args.workers} vLLM-CPU workers"
    print(
        "\n".join(
            result_lines(title, decisions, args.workers, out, run_files(args.router, args.policy))
        )
    )
    return 0


def _write(path: Path, decisions: list[Decision]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["request_id", "predicted", "actual", "cached_tokens", "learned"])
        writer.writerows(
            (d.request_id, d.predicted, d.actual, d.cached_tokens, d.learned) for d in decisions
        )


if __name__ == "__main__":
    sys.exit(main())
