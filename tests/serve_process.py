"""`python -m harness.builtin_server` as a process on a free loopback port, for the fault tests.

`ServeProcess` starts it, waits for /health, and stops it with SIGTERM; its stderr goes to a file
that a test reads (`log()`) to check that no traceback was printed. `run_serve` runs a command
line that must end by itself (a refused configuration) and returns its exit status and output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from harness.builtin_server.server import free_port

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model=tiny", "device=cpu", "engine.backend=torch", "engine.kv_capacity_tokens=4096"]
TEXT = ["model=smollm2-rand", *TINY[1:]]  # a model with a real tokenizer: takes text prompts


def serve_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def serve_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "harness.builtin_server", *args]


def run_serve(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess:
    """A command line that ends by itself (a refusal): its exit status, stdout and stderr."""
    return subprocess.run(
        serve_command(args),
        cwd=ROOT,
        env=serve_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


class ServeProcess:
    def __init__(self, args: list[str], start_timeout_s: float = 180) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [*args, f"port={self.port}"]
        self.start_timeout_s = start_timeout_s
        self._log = tempfile.NamedTemporaryFile(prefix="serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            serve_command(self.args),
            cwd=ROOT,
            env=serve_env(),
            stdout=self._log,
            stderr=self._log,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the server did not start: {self.log()}")
            time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not self._log.closed:
            self._log.close()
            self._final_log = self.log()
            Path(self._log.name).unlink()

    def log(self) -> str:
        """What the server printed (stdout and stderr) so far."""
        if self._log.closed and hasattr(self, "_final_log"):
            return self._final_log
        return Path(self._log.name).read_text(errors="replace")

    def client(self, timeout_s: float = 60) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s)


def assert_error_body(reply: httpx.Response, status: int, param: str | None = "") -> dict:
    """An OpenAI-style error: {"error": {"message", "type", "param", "code"}} with `status`."""
    assert reply.status_code == status, (reply.status_code, reply.text[:500])
    assert reply.headers["content-type"].startswith("application/json"), reply.headers
    error = json.loads(reply.content)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["code"] == status and error["message"] and isinstance(error["type"], str)
    if param != "":
        assert error["param"] == param, error
    return error


def assert_one_error_line(done: subprocess.CompletedProcess, needle: str) -> None:
    """A refused command line: exit 2, one `error:` line naming the problem, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    assert needle in lines[0], lines[0]
