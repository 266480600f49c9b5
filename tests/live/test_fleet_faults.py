"""The real-router launcher (harness/routers/fleet.py) when its processes fail (issue 48, item 2).

A router that is missing or unusable is one `error:` line and exit 2 before anything starts; a
worker killed mid-run ends the run with one `error:` line naming it (exit 1); a worker port taken
between the launcher's check and the worker's bind ends the start naming that port. After each,
no process the launcher started is alive: every process it starts carries a marker in its
environment, and /proc is searched for it (no psutil). The routers come from
scripts/setup_routers.sh: missing, a failure under CI=true, else a skip (the killed-worker case).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.routers.faults import FleetFault
from harness.routers.fleet import routers_venv, worker_fleet
from tests.router_util import need_router

MARK = "PREFIXBENCH_FAULT_TEST"


def _marked(mark: str) -> list[int]:
    """PIDs of live processes (zombies aside) whose environment holds MARK=mark."""
    needle = f"{MARK}={mark}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
            state = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone, or not ours to read
        if needle in env.split(b"\0") and state != "Z":
            out.append(int(d))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _fleet(args: list[str], venv: str, mark: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PREFIXBENCH_ROUTERS_VENV": venv, MARK: mark}
    cmd = [sys.executable, "-m", "harness.routers.fleet", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _broken_venv(tmp_path: Path, how: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    if how == "python without the router":  # a Python that cannot import sglang_router
        (venv / "bin" / "python").symlink_to(sys.executable)
    elif how == "router not executable":
        (venv / "bin" / "vllm-router").write_bytes(b"\x7fELF")
        (venv / "bin" / "vllm-router").chmod(0o644)
    return venv


@pytest.mark.parametrize(
    "router, how",
    [
        ("sglang", "empty folder"),
        ("vllm", "empty folder"),
        ("sglang", "python without the router"),
        ("vllm", "router not executable"),
    ],
)
def test_an_unusable_router_is_one_line_and_starts_nothing(tmp_path, router, how):
    mark = uuid.uuid4().hex
    venv = _broken_venv(tmp_path, how)
    out = tmp_path / "out"
    args = ["--router", router, "--policy", "round_robin", "--workers", "2", "--out", str(out)]
    p = _fleet(args, str(venv), mark)
    _, err = p.communicate(timeout=50)
    assert p.returncode == 2
    line = _one_error_line(err)
    assert f"{router}-router is not installed in {venv}" in line
    assert not out.exists() and _marked(mark) == []


def _router_started(p: subprocess.Popen[str], mark: str, timeout_s: float) -> bool:
    """Wait until the launcher has started its router (sglang-router renames its process
    `sglang::router`; the launcher's import probe before the workers is not it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and p.poll() is None:
        if any(
            "sglang::router" in _cmdline(pid) or "launch_router" in _cmdline(pid)
            for pid in _marked(mark)
        ):
            return True
        time.sleep(0.1)
    return False


def test_a_worker_killed_mid_run_ends_it_in_one_line_with_no_orphan(tmp_path):
    need_router("sglang")
    mark = uuid.uuid4().hex
    # 10,000 requests one at a time (a few hundred a second): still sending when the worker dies
    args = ["--router", "sglang", "--policy", "round_robin", "--workers", "2"]
    args += ["--groups", "100", "--per-group", "100", "--out", str(tmp_path / "out")]
    p = _fleet(args, str(routers_venv()), mark)
    try:
        assert _router_started(p, mark, 240), p.poll()
        time.sleep(5)  # registered, warmed up, and some of the 10,000 requests answered
        victim = next(pid for pid in _marked(mark) if "worker_tag=w0" in _cmdline(pid))
        os.kill(victim, signal.SIGKILL)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:  # the test failed first: stop the launcher and what it started
            p.kill()
            p.wait()
        left = _marked(mark)  # read before the cleanup below: what the launcher left
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert p.returncode == 1
    line = _one_error_line(err)
    assert f"worker w0 (pid {victim}) exited, killed by signal 9" in line
    assert left == []  # the other worker and the router stopped by their PIDs


def test_a_worker_port_taken_before_the_bind_is_named_and_nothing_is_left(tmp_path, monkeypatch):
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK, mark)  # the workers inherit it
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))  # the launcher found it free; then it was taken
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(FleetFault) as caught, worker_fleet(1, tmp_path, ports=[port]):
            pytest.fail("a worker started on a port already taken")
    said = str(caught.value)
    assert f"worker w0 (port {port}) (pid " in said and "exited, exit status" in said
    assert "\n" not in said
    assert _marked(mark) == []
