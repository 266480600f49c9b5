"""Set up and run the server: compose the config, build the engine and app, run uvicorn.

`compose_config` reads conf/serve.yaml plus command-line overrides into a checked `ServeConfig`
(every knob in range, the device usable, the KV pool and weights within the memory available);
`prepare` builds the engine (real executor, greedy decoding), its thread and the Starlette app;
`serve` runs uvicorn in this process (its signal handling: SIGTERM/SIGINT shut down cleanly);
`InProcessServer` runs one in a background thread on a free port (tests, in-process clients).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import signal
import socket
import stat
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette

from engines.cache import designs_with
from engines.cache.protocol import KvEventSource
from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import HostTier
from harness.builtin_server.app import Limits, ServedModel, build_app
from harness.builtin_server.deadlines import deadline_protocol
from harness.builtin_server.engine_thread import EngineThread
from harness.builtin_server.kv_publisher import KvEventPublisher, check_endpoint
from harness.builtin_server.request_log import RequestLog
from harness.builtin_server.step_log import StepLog
from harness.builtin_server.text import load_codec
from harness.config.checks import check_device, require_int, require_number
from harness.config.errors import BadInput
from harness.config.schema import CONF_DIR, ServeConfig

GROUPS = ("engine", "model")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


@dataclass(frozen=True)
class Prepared:
    cfg: ServeConfig
    app: Starlette
    thread: EngineThread
    model: ServedModel


def compose_config(argv: list[str]) -> ServeConfig:
    """conf/serve.yaml with `argv`'s overrides, as a checked ServeConfig (BadInput otherwise)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.config.checks import check_known_keys
    from harness.config.preflight import options

    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in GROUPS and value not in options(key):
            raise BadInput(f"unknown {key} {value!r}; valid: {', '.join(options(key))}")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="serve"):
        dcfg = compose(config_name="serve", overrides=argv)
    check_known_keys(dcfg)
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, ServeConfig)  # conf/serve.yaml's schema is base_serve
    check_serve_config(cfg)
    return cfg


def check_serve_config(cfg: ServeConfig) -> None:
    from harness.config.footprint import check_engine_footprint
    from harness.config.plausible import check_model_and_engine

    cfg.engine.validate()
    cfg.model.validate()
    if not isinstance(cfg.host, str) or not cfg.host:
        raise BadInput(f"host must be an address to listen on, got {cfg.host!r}")
    require_int("port", cfg.port, 0, 65535)
    if cfg.served_model_name is not None and not cfg.served_model_name:
        raise BadInput("served_model_name must be a non-empty name or null")
    require_int("max_tokens_default", cfg.max_tokens_default, 1, cfg.model.max_position_embeddings)
    require_int("step_log_size", cfg.step_log_size, 1, 10**8)
    require_int("threads", cfg.threads, 1, 1024)
    require_number("timeout_graceful_shutdown_s", cfg.timeout_graceful_shutdown_s, 86_400)
    if cfg.worker_tag is not None and not cfg.worker_tag:
        raise BadInput("worker_tag must be a non-empty name or null")
    require_int("max_body_bytes", cfg.max_body_bytes, 1024, 2**31)
    require_number("header_timeout_s", cfg.header_timeout_s, 86_400)
    require_number("body_timeout_s", cfg.body_timeout_s, 86_400)
    if cfg.log_level not in LOG_LEVELS:
        raise BadInput(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {cfg.log_level!r}")
    check_device(cfg.device)
    _check_log_path("step_log", cfg.step_log)
    _check_log_path("request_log", cfg.request_log)
    if cfg.kv_events_endpoint is not None:
        check_endpoint(cfg.kv_events_endpoint)
        sources = designs_with(KvEventSource)
        if cfg.engine.cache not in sources:
            raise BadInput(
                f"kv_events_endpoint: vLLM's KV-cache events come from the {', '.join(sources)} "
                f"cache; engine.cache={cfg.engine.cache!r} publishes none"
            )
    # The KV pool and weights are allocated as the engine is built: their size first.
    check_engine_footprint(cfg.engine, cfg.model, cfg.device)
    check_model_and_engine(cfg.model, cfg.engine)


def _check_log_path(key: str, path: str | None) -> None:
    """A file we can append to: its folder exists, it is no folder, pipe or socket."""
    if path is None:
        return
    if not isinstance(path, str) or not path:
        raise BadInput(f"{key} must be a file path or null, got {path!r}")
    target = Path(path)
    if not target.parent.is_dir():
        raise BadInput(f"{key}: the folder {str(target.parent)!r} does not exist")
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInput(f"{key}: cannot use {path!r}: {exc.strerror}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):  # a file, or /dev/null and the like
        raise BadInput(f"{key}: {path!r} is not a file")


def check_bindable(host: str, port: int) -> None:
    """Fail fast, before the model is built, when the address cannot be listened on."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            s.bind((host, port))
    except OSError as exc:
        raise BadInput(f"host/port: cannot listen on {host}:{port}: {exc.strerror}") from None


def prepare(cfg: ServeConfig) -> Prepared:
    """Build the engine on the real executor, its thread and the app (the thread starts with
    the app's lifespan)."""
    import torch

    from engines.build import build_engine

    # The engine's step records feed the server's step log (which bounds their number).
    engine_cfg = dataclasses.replace(cfg.engine, step_log=True)
    engine = build_engine(engine_cfg, cfg.model, executor="real", device=cfg.device)
    torch.set_num_threads(cfg.threads)
    model = ServedModel(
        name=cfg.served_model_name or cfg.model.name,
        max_model_len=cfg.model.max_position_embeddings,
        vocab_size=cfg.model.vocab_size,
        max_tokens_default=cfg.max_tokens_default,
        codec=load_codec(cfg.model.tokenizer),
        created=int(time.time()),
        version=_version(),
        worker_tag=cfg.worker_tag,
        host_tier=isinstance(engine.cache, HostTier),
        storage_tier=isinstance(engine.cache, StorageTier),
    )
    try:
        step_log = StepLog(cfg.step_log_size, cfg.step_log)
    except OSError as exc:
        raise BadInput(f"step_log: cannot open {cfg.step_log!r}: {exc.strerror}") from None
    publisher = None
    if cfg.kv_events_endpoint is not None:
        assert isinstance(engine.cache, KvEventSource)  # check_serve_config: event designs only
        try:
            publisher = KvEventPublisher(cfg.kv_events_endpoint)
        except Exception as exc:  # zmq.ZMQError: the address is taken or unusable
            raise BadInput(
                f"kv_events_endpoint: cannot bind {cfg.kv_events_endpoint}: {exc}"
            ) from None
        engine.cache.record_kv_events()
    thread = EngineThread(
        engine,
        step_log,
        scheduler=cfg.engine.scheduler_design,
        publisher=publisher,
        host_tier_tokens=cfg.engine.host_tier.tokens,
        storage_tier=isinstance(engine.cache, StorageTier),
    )
    limits = Limits(cfg.max_body_bytes)
    try:
        request_log = RequestLog(cfg.request_log) if cfg.request_log else None
    except OSError as exc:
        raise BadInput(f"request_log: cannot open {cfg.request_log!r}: {exc.strerror}") from None
    return Prepared(cfg, build_app(thread, model, limits, request_log), thread, model)


SHUTDOWN_MARGIN_S = 5.0  # uvicorn's own deadline, after ours: it cancels handlers (tracebacks)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prefixbench")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return "unknown"


def _uvicorn_server(prepared: Prepared, port: int):
    """A uvicorn server whose shutdown ends what is still in flight after the grace period:
    the engine thread fails those requests (a stream gets an error event and [DONE]), so every
    handler returns and uvicorn never has to cancel one."""
    import uvicorn

    cfg, thread = prepared.cfg, prepared.thread
    grace_s = cfg.timeout_graceful_shutdown_s

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None) -> None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(grace_s, thread.fail_in_flight, "the server is shutting down")
            try:
                await super().shutdown(sockets)
            finally:
                timer.cancel()

    config = uvicorn.Config(
        prepared.app,
        host=cfg.host,
        port=port,
        log_level=cfg.log_level,
        timeout_graceful_shutdown=math.ceil(grace_s + SHUTDOWN_MARGIN_S),
        lifespan="on",
        # A refused body is discarded up to 4x the cap (at least 64 MiB), then the socket closes.
        http=deadline_protocol(
            cfg.header_timeout_s, cfg.body_timeout_s, max(4 * cfg.max_body_bytes, 64 * 2**20)
        ),
    )
    return Server(config)


def serve(prepared: Prepared) -> None:
    """Serve until SIGINT/SIGTERM (uvicorn's handlers), then stop the engine thread."""
    from harness.config.startup_signals import raise_held

    cfg = prepared.cfg
    server = _uvicorn_server(prepared, cfg.port)

    def on_signal(signum, frame) -> None:
        """From here on a signal stops the server cleanly (exit 0): before uvicorn takes the
        signals, it starts and at once shuts down; after, uvicorn raises the signal it acted on
        again once it has shut down, which is then complete."""
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    raise_held()  # one that arrived before: the start-up was interrupted, nothing served
    print(
        f"serving {prepared.model.name} ({cfg.engine.cache} cache, {cfg.engine.scheduler_design} "
        f"scheduler) on http://{cfg.host}:{cfg.port}",
        file=sys.stderr,
        flush=True,
    )
    server.run()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class InProcessServer:
    """uvicorn in a background thread on a free port of 127.0.0.1 (no signal handlers)."""

    def __init__(self, prepared: Prepared, port: int | None = None) -> None:
        self.port = port or free_port(prepared.cfg.host)
        self.url = f"http://{prepared.cfg.host}:{self.port}"
        self.server = _uvicorn_server(prepared, self.port)
        self._thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> InProcessServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(60)
