"""The server client's own cost at rising open-loop Poisson rates (docs/servers.md §1.6).

    python scripts/bench_client.py --url http://127.0.0.1:8000 [--rates 25 50 100 200] [--n 400]
        [--cpu 1] [--realtime]

Per rate: N requests of 16 random prompt tokens and 1 output token, Poisson arrivals, no
concurrency cap, through the same driver and client a server run uses. Reported: send lag (the
time from a request's scheduled arrival to its hand-off to the HTTP client; the server's speed
does not enter it), the client process's CPU time per request, and the time from a reply's last
byte to the driver recording it. Goal on this machine: p99 send lag <= 2 ms at 200 req/s.

`--cpu N` pins the client to CPU N; start the server on the other cores
(`bash scripts/start_vllm.sh --cpus 0`), or the client's tail measures the scheduler handing
its core to the server, not the client. `--realtime` also gives the client a real-time
priority (SCHED_FIFO 10; needs root or CAP_SYS_NICE), so other work on its core cannot delay it:
the client sleeps between events, so it cannot starve that core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import numpy as np

from harness.client.arrivals import with_arrivals
from harness.client.config import LoadConfig
from harness.live_server.config import ServerConfig
from harness.live_server.driver import completion_body, drive
from harness.live_server.flavours import FLAVOURS
from harness.live_server.http_client import ServerClient
from workloads.request import Request


def requests_for(n: int, rate: float, seed: int) -> list[Request]:
    rng = np.random.default_rng([seed, int(rate * 1000)])
    reqs = [
        Request(f"r{i}", tuple(int(t) for t in rng.integers(100, 40000, 16)), max_new_tokens=1)
        for i in range(n)
    ]
    return with_arrivals(reqs, LoadConfig(mode="poisson", rate=rate), seed)


async def one_rate(cfg: ServerConfig, model: str, rate: float, n: int, seed: int) -> dict:
    flavour = FLAVOURS.get(cfg.flavour)
    client = ServerClient(cfg)
    recorded: list[tuple[float, float]] = []  # (reply finish, recorded at), perf_counter

    def on_sent(s) -> None:
        recorded.append((s.reply.finish_s, time.perf_counter()))

    reqs = requests_for(n, rate, seed)
    cpu0 = time.process_time()
    try:
        sent = await drive(
            client,
            reqs,
            lambda r, p: completion_body(flavour, model, r, p),
            None,
            lambda text: [],
            closed_loop=False,
            on_sent=on_sent,
        )
    finally:
        await client.aclose()
    cpu_s = time.process_time() - cpu0
    lag_ms = np.array([(s.send_s - s.scheduled_s) * 1e3 for s in sent])
    rec_ms = np.array([(b - a) * 1e3 for a, b in recorded])
    ok = sum(s.reply.status == "ok" for s in sent)
    return {
        "rate": rate,
        "requests": n,
        "ok": ok,
        "send_lag_p50_ms": float(np.percentile(lag_ms, 50)),
        "send_lag_p99_ms": float(np.percentile(lag_ms, 99)),
        "send_lag_max_ms": float(lag_ms.max()),
        "cpu_ms_per_request": cpu_s * 1e3 / n,
        "record_lag_p50_ms": float(np.percentile(rec_ms, 50)),
        "record_lag_p99_ms": float(np.percentile(rec_ms, 99)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="llama-rand-smollm2")
    ap.add_argument("--rates", type=float, nargs="+", default=[25.0, 50.0, 100.0, 200.0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu", type=int, default=None, help="pin the client to this CPU")
    ap.add_argument("--realtime", action="store_true", help="SCHED_FIFO priority 10")
    args = ap.parse_args()
    try:
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        if args.realtime:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except OSError as exc:
        what = "--realtime needs root or CAP_SYS_NICE" if args.realtime else f"--cpu {args.cpu}"
        raise SystemExit(f"error: {what}: {exc.strerror}") from None
    cfg = ServerConfig(url=args.url, request_timeout_s=120.0)
    pinned = {"client_cpus": sorted(os.sched_getaffinity(0)), "realtime": args.realtime}
    for rate in args.rates:
        row = asyncio.run(one_rate(cfg, args.model, rate, args.n, args.seed))
        print(json.dumps({**row, **pinned}))


if __name__ == "__main__":
    main()
