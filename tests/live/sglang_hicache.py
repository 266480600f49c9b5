"""An SGLang 0.5.23 server with HiCache on this CPU machine, for tests/live: started from
.venv-sglang with the three stubs of tests/fixtures/sglang_hicache_stubs on its PYTHONPATH (host
pinning, the copy kernels, CPU streams), stopped by its PID; `generate` sends one request and
returns its cached tokens per tier and its output ids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from harness.builtin_server.server import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
STUBS = ROOT / "tests" / "fixtures" / "sglang_hicache_stubs"
MODEL = ROOT / ".models" / "llama-rand-smollm2"
START_S = 600


class Served(NamedTuple):
    device: int
    host: int
    output_ids: tuple[int, ...]
    storage: int = 0  # with a storage backend (`cached_tokens_details.storage`)


@contextmanager
def hicache_server(
    kv_tokens: int,
    write_policy: str,
    log: Path,
    host_ratio: float | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[str]:
    """A server of `kv_tokens` device tokens (page size 1) and a 1 GB host pool, or with
    `host_ratio` a host pool of that many times the device pool (`--hicache-ratio`: SGLang sizes it
    int(device tokens x ratio) plus one page, `mem_cache/pool_host/base.py`), with `extra` flags
    appended; its URL."""
    port = free_port()
    env = {
        **os.environ,
        "SGLANG_USE_CPU_ENGINE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(STUBS),
    }
    env.pop("VIRTUAL_ENV", None)
    args = [
        str(VENV_PYTHON), "-m", "sglang.launch_server", "--model-path", str(MODEL),
        "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
        "--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
        "--grammar-backend", "none", "--disable-cuda-graph", "--page-size", "1",
        "--max-total-tokens", str(kv_tokens), "--enable-cache-report",
        "--enable-hierarchical-cache", *_host_size(host_ratio),
        "--hicache-write-policy", write_policy, *extra,
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, log)
        yield url
    finally:
        _stop(proc)


def _host_size(host_ratio: float | None) -> list[str]:
    """The host pool's size flags: 1 GB (the smallest --hicache-size), or a ratio of the device."""
    if host_ratio is None:
        return ["--hicache-size", "1"]
    return ["--hicache-ratio", str(host_ratio)]


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"SGLang exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"SGLang did not become healthy in {START_S} s: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: SGLang's launcher ends its scheduler and detokenizer processes with itself."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def host_pool_tokens(log: Path) -> int:
    """The host pool's size in tokens, as the server logged it."""
    for line in log.read_text().splitlines():
        if "host pool:" in line and " tokens," in line:
            return int(line.split("host pool:")[1].split(" tokens,")[0])
    raise ValueError("the server logged no host pool size")


def generate(url: str, prompt: tuple[int, ...], max_new_tokens: int) -> Served:
    body = {
        "input_ids": list(prompt),
        "sampling_params": {
            "max_new_tokens": max_new_tokens,
            "temperature": 0,
            "ignore_eos": True,
        },
        "return_cached_tokens_details": True,
    }
    req = urllib.request.Request(
        f"{url}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        reply = json.load(resp)
    meta = reply["meta_info"]
    details = meta.get("cached_tokens_details")
    if details is None:  # SGLang leaves the details out when nothing was cached
        if meta["cached_tokens"]:
            raise ValueError(f"cached tokens {meta['cached_tokens']} without details")
        details = {"device": 0, "host": 0}
    return Served(
        details["device"], details["host"], tuple(reply["output_ids"]), details.get("storage", 0)
    )
