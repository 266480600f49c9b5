"""A real-router run (`python -m harness ... fleet.real=...`, harness/routers/target.py) when its
fleet's processes fail (issue 48, item 2; since issue 44 through the one pipeline: the side CLI
these once ran through, `harness.routers.fleet`'s `main`, is gone).

A router that is missing or unusable is one `error:` line and exit 2 before anything starts, and
no run folder is left; a worker killed mid-run ends the run with one `error:` line naming it, exit
1, the rows so far kept in a `failed` run; a worker port taken between the harness's check and the
worker's bind ends the start with one `error:` line naming that port, exit 1. The error line
names each dead process's log, which is kept. After each, no process the run started is alive:
every one carries a marker in its environment, and /proc is searched for it (no psutil). Each run
is the CLI's job in this process (tests/harness_util.py `run_harness`: `execute`, without ~10 s of
imports). The routers come from scripts/setup_routers.sh: missing, a failure under CI=true, else a
skip (the cases that start workers).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness.results.rowlog import count_rows
from harness.routers import fleet
from tests.harness_util import merged, run_harness
from tests.router_util import need_router, system_prompt_run

MARK = "PREFIXBENCH_FAULT_TEST"
# 2 built-in workers of smollm2-rand behind sglang-router, round robin: 2 groups x 2 prompts of
# a 64-token system prompt, 2 output tokens, one at a time
RUN = [
    *system_prompt_run(groups=2, per_group=2, prefix_len=64),
    "fleet.replicas=2",
    "fleet.router=round_robin",
    "fleet.real=sglang-router",
]
LONGER = "workload.prompts_per_group=12"


@pytest.fixture
def marked(monkeypatch, tmp_path) -> str:
    """A marker every process the run starts inherits; the run's scratch folder (its fleet's
    logs until the run folder gets them) under tmp_path."""
    mark = uuid.uuid4().hex
    monkeypatch.setenv(MARK, mark)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return mark


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


def _one_error_line(err: str) -> str:
    """The run's one `error:` line; a failed run also names its folder (`run directory:`)."""
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert all(line in errors or line.startswith("run directory: ") for line in lines), err
    return errors[0]


def _named_log(line: str) -> Path:
    """The first log the error line names: it must still be there to read."""
    found = re.search(r"\(log (\S+?\.log)", line)
    assert found, line
    return Path(found.group(1))


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
    "real, how",
    [
        ("sglang-router", "empty folder"),
        ("vllm-router", "empty folder"),
        ("sglang-router", "python without the router"),
        ("vllm-router", "router not executable"),
    ],
)
def test_an_unusable_router_is_one_line_and_starts_nothing(
    tmp_path, monkeypatch, marked, real, how
):
    venv = _broken_venv(tmp_path, how)
    monkeypatch.setenv("PREFIXBENCH_ROUTERS_VENV", str(venv))
    run_dir = tmp_path / "run"
    run = run_harness([*RUN[:-1], f"fleet.real={real}"], run_dir)
    assert run.returncode == 2, run.stderr
    line = _one_error_line(run.stderr)
    assert f"{real} is not installed in {venv}: run bash scripts/setup_routers.sh" in line
    assert not run_dir.exists() and _marked(marked) == []
    assert [p.name for p in tmp_path.iterdir()] == ["venv"]  # no scratch folder either


def test_a_worker_killed_mid_run_ends_it_in_one_line_with_no_orphan(tmp_path, marked):
    need_router("sglang")
    run_dir = tmp_path / "run"
    done, killed = threading.Event(), []

    def kill_w0_mid_run() -> None:  # once 3 rows are measured: the workers are up and answering
        while not done.is_set() and count_rows(run_dir / "rows.jsonl") < 3:
            time.sleep(0.02)
        victims = [pid for pid in _marked(marked) if "worker_tag=w0" in _cmdline(pid)]
        if not done.is_set() and victims:
            os.kill(victims[0], signal.SIGKILL)
            killed.append(victims[0])

    killer = threading.Thread(target=kill_w0_mid_run, daemon=True)
    killer.start()
    try:  # 48 requests: a few seconds, still sending when the worker dies
        run = run_harness(merged(RUN, ["workload.num_groups=4", LONGER]), run_dir)
    finally:
        done.set()
        killer.join(10)
        left = _marked(marked)  # read before the cleanup below: what the run left
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert killed, f"the run ended before its worker was killed: {run.stderr[-2000:]}"
    assert run.returncode == 1, run.stderr[-3000:]
    line = _one_error_line(run.stderr)
    assert f"worker w0 (pid {killed[0]}) exited, killed by signal 9" in line
    assert _named_log(line).is_file()
    assert left == []  # the other worker and the router stopped by their PIDs
    summary = run.summary
    assert summary["status"] == "failed" and f"pid {killed[0]}" in summary["error"]
    assert 3 <= summary["completed"] < 48  # the rows measured before the kill, kept


def test_a_worker_port_taken_before_the_bind_is_named_and_nothing_is_left(
    tmp_path, monkeypatch, marked
):
    """The harness finds a free port for each worker; another process can take it before the
    worker binds it. Forced here: the first port handed out is one a socket of this test holds."""
    need_router("sglang")
    run_dir = tmp_path / "run"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        ports, free = iter([port]), fleet.free_port
        monkeypatch.setattr(fleet, "free_port", lambda: next(ports, 0) or free())
        run = run_harness(RUN, run_dir)
    assert run.returncode == 1, run.stderr[-3000:]
    line = _one_error_line(run.stderr)
    assert re.search(rf"worker w\d \(port {port}\) \(pid \d+\) exited, exit status", line), line
    assert "Address already in use" in line  # the worker log's last line
    assert _named_log(line).is_file()
    assert _marked(marked) == []
    assert run.summary["status"] == "failed" and run.summary["completed"] == 0
