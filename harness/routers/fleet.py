"""A fleet behind a real router: N built-in servers and sglang-router or vllm-router on loopback,
driven in waves of requests, with the routing twin (docs/fleet.md §5). The pieces a run of the
pipeline (harness/routers/target.py: `worker_fleet`, `router_up`, `watched`) and the twin's
checks (`route_through`: tests/live/test_fleet_real.py, scripts/fleet_twin_scores.py) start
fleets with; it has no command line of its own.

    start N workers (python -m harness.builtin_server worker_tag=wI) ─▶ start the router
    for each request: POST router/v1/completions, streamed ─▶ its system_fingerprint names the worker
                      the twin (policies.py) predicts the worker from the same stream
    ─▶ rows (request, predicted, actual), the share equal, then every process stopped by its PID

The harness owns every port (free loopback ports; each router gets its own Prometheus port) and
every process. Prompts are text: sglang-router refuses token-id prompts, and its cache_aware tree
works on characters, which the twin's tree then holds too; vllm-router's holds the token ids the
workers' /tokenize gives, and so does its twin's (`tokenized_by`); its kv_aware hashes the same
ids into blocks of the workers' block size (`fleet_layout`), as the twin's index does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from engines.cache import DEFAULT_DESIGN, designs_with
from engines.cache.protocol import KvEventSource
from engines.config import EngineConfig
from engines.errors import BadInput
from harness.fleet.config import FleetConfig
from harness.fleet.policies import Routed
from harness.live_server.http_client import Reply
from harness.routers.drive import Decision, TreeKey, drive_router, send_completion
from harness.routers.faults import FleetFault, exited, fault
from harness.routers.kv_index import KvEventIndex
from harness.routers.learned import read_order
from harness.routers.streams import Waves

ROOT = Path(__file__).resolve().parents[2]
ROUTER_KINDS = ("sglang", "vllm")
# the policies each router offers that the twin models
TWINNED = {
    "sglang": ("round_robin", "random", "cache_aware", "power_of_two"),
    "vllm": ("round_robin", "random", "cache_aware", "power_of_two", "consistent_hash", "kv_aware"),
}
KV_EVENT_BLOCK = EngineConfig().block_size  # the served apc block size, vllm-router's default too


class ServedBy(Protocol):
    """How a fleet tells which worker served a reply: `before` each wave, `after` each reply."""

    one_at_a_time: bool  # True: it can tell only with one request in flight

    def before(self) -> None: ...

    def after(self, reply: Reply) -> int: ...


class Fingerprint:
    """Which worker served a reply, from the tag a built-in server puts in `system_fingerprint`
    of every chunk of its stream (`worker_tag=wI`); any number of requests may be in flight."""

    one_at_a_time = False

    def before(self) -> None:
        """Nothing to note before a request."""

    def after(self, reply: Reply) -> int:
        if reply.system_fingerprint is None:
            raise ValueError("a reply through the router names no worker (system_fingerprint)")
        return int(reply.system_fingerprint.removeprefix("w"))


WORKER_MODEL = "smollm2-rand"  # the workers' model: a real tokenizer, random weights


@dataclass(frozen=True)
class Workers:
    """A fleet's servers: URLs in string order (worker i is the i-th, the order a router is
    given them in), where each publishes its KV-cache events (None: they do not), in blocks of
    `block_size`, and how a reply tells which one served it."""

    urls: list[str]
    kv_events: list[str] | None = None
    block_size: int = KV_EVENT_BLOCK
    served_by: ServedBy = field(default_factory=Fingerprint)
    procs: tuple[subprocess.Popen[bytes], ...] = ()  # the workers' processes, when ours
    logs: Path = Path()  # where procK.log is worker K's output

    def dead(self) -> list[str]:
        """The workers whose process has exited, each as one phrase."""
        return exited(self.procs, [f"worker w{i}" for i in range(len(self.procs))], self.logs)


def routers_venv() -> Path:
    return Path(os.environ.get("PREFIXBENCH_ROUTERS_VENV", ROOT / ".venv-routers"))


def router_available(kind: str) -> bool:
    venv = routers_venv()
    if kind == "sglang":
        probe = [str(venv / "bin" / "python"), "-c", "import sglang_router"]
        if not (venv / "bin" / "python").is_file():
            return False
        quiet = subprocess.DEVNULL  # a venv without the package: its traceback is not ours
        return subprocess.run(probe, stdout=quiet, stderr=quiet).returncode == 0
    binary = venv / "bin" / "vllm-router"
    return binary.is_file() and os.access(binary, os.X_OK)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def router_command(
    kind: str, cfg: FleetConfig, workers: Workers, port: int, metrics_port: int, model: str = ""
) -> list[str]:
    """The router's command line: our policy's knobs as its flags (the same defaults)."""
    venv = routers_venv()
    if kind == "sglang":
        head = [str(venv / "bin" / "python"), "-m", "sglang_router.launch_router"]
    elif kind == "vllm":
        head = [str(venv / "bin" / "vllm-router")]
    else:
        raise BadInput(f"unknown router {kind!r}; valid: {', '.join(ROUTER_KINDS)}")
    args = [*head, "--worker-urls", *workers.urls, "--policy", cfg.router]
    args += ["--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics_port)]
    if cfg.router == "cache_aware":
        args += ["--cache-threshold", str(cfg.cache_threshold)]
        args += ["--balance-abs-threshold", str(cfg.balance_abs_threshold)]
        args += ["--balance-rel-threshold", str(cfg.balance_rel_threshold)]
        args += ["--eviction-interval-secs", str(int(cfg.eviction_interval_s))]
        args += ["--max-tree-size", str(cfg.max_tree_size)]
    if cfg.router == "kv_aware":  # vllm-router indexes each worker's KV events
        if workers.kv_events is None:
            raise BadInput(
                "kv_aware needs workers that publish KV events "
                f"(engine={'|'.join(designs_with(KvEventSource))})"
            )
        for url, endpoint in zip(workers.urls, workers.kv_events):
            args += ["--kv-event-source", f"{url}={endpoint}"]
        args += ["--kv-event-model", model, "--kv-event-block-size", str(workers.block_size)]
    return args


def worker_command(
    i: int,
    port: int,
    model: str,
    engine: str,
    kv_events: str | None = None,
    overrides: Sequence[str] = (),
) -> list[str]:
    """A built-in server tagged w<i>; with `kv_events`, publishing vLLM's KV-cache events there;
    `overrides`: more of its config (`engine.block_size=32`)."""
    events = [f"kv_events_endpoint={kv_events}"] if kv_events else []
    return [
        sys.executable, "-m", "harness.builtin_server", f"model={model}", f"engine={engine}",
        f"port={port}", f"worker_tag=w{i}", "threads=1", "log_level=warning", *events,
        *overrides,
    ]  # fmt: skip


@contextlib.contextmanager
def processes(commands: list[list[str]], logs: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start each command (its output to a log file) and stop every one by its PID on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    try:
        for k, cmd in enumerate(commands):
            with open(logs / f"proc{k}.log", "wb") as out:
                try:
                    procs.append(subprocess.Popen(cmd, stdout=out, stderr=out, cwd=ROOT, env=env))
                except OSError as exc:  # not executable, not a program: the ones started stop
                    raise FleetFault(f"cannot start {cmd[0]}: {exc.strerror or exc}") from None
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_ready(
    url: str, procs: list[subprocess.Popen[bytes]], timeout_s: float, path: str = "/v1/models"
) -> None:
    """Poll `path` until it answers 200. A router is polled on its own /health: a /v1/models
    through it would be routed, and would move round_robin's counter before the first request."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise FleetFault(f"a process exited before {url} was ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready within {timeout_s} s")


def wait_workers(
    url: str, num_workers: int, procs: list[subprocess.Popen[bytes]], timeout_s: float
) -> None:
    """Poll the router's /readiness until it holds every worker, healthy. sglang-router (0.3)
    answers /health before it has registered its workers (that runs in the background), so a
    request sent then is routed among the ones registered so far: under CI load round robin's
    first pick once went to the only one registered, and its counter was one ahead of the twin."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise FleetFault(f"a process exited before the router at {url} held its workers")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            body = httpx.get(f"{url}/readiness", timeout=2).json()
            if body.get("healthy_workers") == body.get("total_workers") == num_workers:
                return
        time.sleep(0.2)
    raise TimeoutError(
        f"the router at {url} did not hold {num_workers} healthy workers in {timeout_s} s"
    )


@dataclass(frozen=True)
class FleetLayout:
    """Built-in workers before any of them starts: the fleet as a router is given it (its block
    size the one every worker is started with) and each worker's command line."""

    workers: Workers
    commands: list[list[str]]


def fleet_layout(
    ports: Sequence[int],
    model: str = WORKER_MODEL,
    engine: str = DEFAULT_DESIGN,
    block_size: int | None = None,
    overrides: Sequence[str] = (),
) -> FleetLayout:
    """Workers on `ports` (worker i on the i-th in string order, the order a router is given
    them in); those whose cache is a KvEventSource publish their KV events. `block_size`: every
    worker's, and the one the router and the twin's index are told (None: the design's own, and
    KV_EVENT_BLOCK for them); it is never an override, so the two cannot differ."""
    if any(o.startswith("engine.block_size=") for o in overrides):
        raise ValueError("a worker's block size is fleet_layout's block_size, not an override")
    ports = sorted(ports, key=str)
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    publish = engine in designs_with(KvEventSource)  # the designs that keep vLLM's KV events
    events = [f"tcp://127.0.0.1:{free_port()}" for _ in ports] if publish else None
    sized = [] if block_size is None else [f"engine.block_size={block_size}"]
    commands = [
        worker_command(i, p, model, engine, events[i] if events else None, [*sized, *overrides])
        for i, p in enumerate(ports)
    ]
    block = KV_EVENT_BLOCK if block_size is None else block_size
    return FleetLayout(Workers(urls, events, block), commands)


@contextlib.contextmanager
def worker_fleet(
    num_workers: int,
    out_dir: Path,
    model: str = WORKER_MODEL,
    engine: str = DEFAULT_DESIGN,
    ready_timeout_s: float = 300.0,
    ports: Sequence[int] | None = None,
    overrides: Sequence[str] = (),
    block_size: int | None = None,
) -> Iterator[Workers]:
    """N built-in servers on free loopback ports, tagged w0..wN-1, as `fleet_layout` lays them
    out. `ports`: the workers' ports instead of free ones (a port found free can be taken before
    the worker binds it; that worker then exits, and the run ends naming it)."""
    ports = sorted(ports or [free_port() for _ in range(num_workers)], key=str)
    layout = fleet_layout(ports, model, engine, block_size, overrides)
    logs = out_dir / "logs" / "workers"
    with processes(layout.commands, logs) as procs:
        names = [f"worker w{i} (port {p})" for i, p in enumerate(ports)]
        try:
            for url in layout.workers.urls:
                wait_ready(url, procs, ready_timeout_s)
        except (FleetFault, TimeoutError) as exc:
            raise fault(str(exc), exited(procs, names, logs)) from None
        yield dataclasses.replace(layout.workers, procs=tuple(procs), logs=logs)


@dataclass(frozen=True)
class RouterUp:
    """A started router over its workers: where to send, the served model name, the twin's KV
    index (kv_aware), the worker order the router logged (vllm-router), the learned facts, the
    fleet's processes found exited (each named, with its log: `watched`) and how the router's
    tree reads a request (None: as sent)."""

    url: str
    model: str
    index: KvEventIndex | None
    order: list[int] | None
    facts: dict[str, object]
    gone: Callable[[], list[str]]
    key: TreeKey | None = None


def tokenized_by(url: str, model: str) -> TreeKey:
    """A text request as vllm-router's cache_aware and kv_aware read it: the prompt's token ids
    from the worker's /tokenize, the same body the router sends (0.1.17 asks a worker for
    /v1/completions/render, then /tokenize; cache_aware matches its tree on the ids it gets,
    and without them routes by load alone; kv_aware hashes them into blocks, docs/fleet.md §5).
    A prompt of token ids is read as sent."""
    import httpx

    def key(req: Routed) -> Routed:
        if not isinstance(req.prompt, str):
            return req
        body = {"model": model, "prompt": req.prompt}
        reply = httpx.post(f"{url}/tokenize", json=body, timeout=30)
        reply.raise_for_status()
        return dataclasses.replace(req, prompt=tuple(reply.json()["tokens"]))

    return key


@contextlib.contextmanager
def watched(gone: Callable[[], list[str]]) -> Iterator[None]:
    """A failure inside that a fleet process caused (a wait that saw one exit, a request cut, a
    reply misread because its worker died) as one FleetFault naming the processes `gone` finds
    exited; a process found exited at the end, though nothing failed, too (a router may route
    around a dead worker: not the fleet we measure). Anything else propagates as it is."""
    import httpx

    try:
        yield
    except (FleetFault, TimeoutError, httpx.HTTPError, KeyError, ValueError) as exc:
        dead = settled(gone)
        if isinstance(exc, (KeyError, ValueError)) and not dead:
            raise  # bad input, or a reply we misread with every process alive: our bug, traced
        ours = isinstance(exc, (FleetFault, TimeoutError))
        what = str(exc) if ours else f"a request failed ({type(exc).__name__}: {exc})"
        raise fault(what[:300], dead) from None
    if dead := gone():
        raise fault("a fleet process exited", dead)


@contextlib.contextmanager
def router_up(
    kind: str,
    cfg: FleetConfig,
    workers: Workers,
    out_dir: Path,
    warm: Sequence[tuple[int, Routed]] = (),
) -> Iterator[RouterUp]:
    """Start the router over the workers (caches flushed first, then each `warm` request sent
    straight to its worker) and stop it on exit; a failure while it starts, of any fleet
    process, is one FleetFault naming the processes that exited. What the caller sends through
    it goes inside `watched(up.gone)` for the same."""
    import httpx

    if cfg.router not in TWINNED.get(kind, ()):
        valid = ", ".join(TWINNED.get(kind, ()))
        raise BadInput(f"{kind}-router policy {cfg.router!r} has no twin; valid: {valid}")
    with watched(workers.dead):
        model = _served_name(workers.urls[0])
        for url in workers.urls:
            httpx.post(f"{url}/reset_prefix_cache", timeout=30).raise_for_status()
    index = None
    if cfg.router == "kv_aware" and workers.kv_events is not None:
        index = KvEventIndex(workers.kv_events, workers.block_size)
    port, metrics_port = free_port(), free_port()
    command = router_command(kind, cfg, workers, port, metrics_port, model)
    logs = out_dir / "logs" / f"router-{kind}-{cfg.router}"
    try:
        with processes([command], logs) as procs:
            router_url = f"http://127.0.0.1:{port}"
            waited = procs + list(workers.procs)  # a worker dying stops the waits too

            def gone() -> list[str]:
                return exited(procs, [f"{kind}-router (port {port})"], logs) + workers.dead()

            facts: dict[str, object] = {"router": kind, "policy": cfg.router}
            with watched(gone):
                wait_ready(router_url, waited, 60.0, "/health")
                wait_workers(router_url, len(workers.urls), waited, 60.0)
                with httpx.Client(timeout=120) as client:
                    for i, req in warm:
                        send_completion(client, workers.urls[i], model, req)
                order = read_order(logs / "proc0.log", workers.urls) if kind == "vllm" else None
                key = None
                if kind == "vllm" and cfg.router in ("cache_aware", "kv_aware"):
                    key = tokenized_by(workers.urls[0], model)
                    reads = "tree_reads" if cfg.router == "cache_aware" else "text_reads"
                    facts[reads] = "token ids (the workers' /tokenize)"
            yield RouterUp(router_url, model, index, order, facts, gone, key)
    finally:
        if index is not None:
            index.stop()


def settled(gone: Callable[[], list[str]], wait_s: float = 3.0) -> list[str]:
    """The processes found dead after a request failed, waiting up to `wait_s` for one to show:
    a streamed reply is cut the moment a worker's socket closes, which can be before the worker's
    exit is seen (the cause to name)."""
    deadline = time.monotonic() + wait_s
    while not (dead := gone()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return dead


def route_through(
    kind: str,
    cfg: FleetConfig,
    workers: Workers,
    stream: list[Routed],
    out_dir: Path,
    warm: Sequence[tuple[int, Routed]] = (),
    concurrency: int = 1,
    waves: Waves | None = None,
) -> list[Decision]:
    """Start the router over the workers (router_up), drive `stream` through it in waves of
    `concurrency` (or in its own `waves`), stop it; what the twin learned goes to
    learned-<router>-<policy>.json. A fleet process's failure is one FleetFault naming it."""
    with router_up(kind, cfg, workers, out_dir, warm) as up, watched(up.gone):
        decisions = drive_router(
            up.url, up.model, stream, cfg, workers, up.index, concurrency, up.order, up.facts,
            waves=None if waves is None else waves.waves,
            max_tokens=None if waves is None else waves.max_tokens, key=up.key,
        )  # fmt: skip
    (out_dir / f"learned-{kind}-{cfg.router}.json").write_text(
        json.dumps(up.facts, indent=1) + "\n"
    )
    return decisions


def _served_name(url: str) -> str:
    import httpx

    return str(httpx.get(f"{url}/v1/models", timeout=10).json()["data"][0]["id"])
