"""A fork server for live tests whose cases each run `python -c CODE` or `python -m MODULE ...`:
one helper process imports the heavy modules once, and every case runs in a child forked from it.

A fresh interpreter pays 2-5 s of CPU importing torch, pandas, Hydra and the harness before a
case that then takes milliseconds; a forked child starts with all of that already in memory. The
child is still its own process: it takes the case's address-space limit (RLIMIT_AS), working
directory and environment, writes fd 1 and 2 into files, runs the code or the module as the
interpreter would (`SystemExit` -> its code, an uncaught exception -> traceback and exit 1, then
non-daemon threads joined and exit handlers run) and ends with os._exit. The server waits under
the case's timeout (a child past it is killed and reported as a timeout) and answers with the exit
code and the two outputs.

Protocol: the server (`python -m tests.zygote WORKDIR MODULE...`) answers `{"ready": ...}` once
its imports are done, then one JSON line per request line on stdin:
`{"kind": "py", "code": ...}` or `{"kind": "module", "argv": [module, args...]}`, with "env" (the
whole environment), "cwd", "timeout" (s) and "as_limit" (bytes) -> `{"returncode", "stdout",
"stderr", "timed_out"}`. The server forks only while it is single-threaded. `Zygote` is the
client: `run(cmd, env, cwd, timeout, as_limit)` takes the command line a subprocess would have run.

What a forked child does not reproduce: a module-level value the server read at import (an
environment variable read when its module was imported keeps the server's value; such a case
needs a fresh interpreter); the hash seed and `random` state, shared by every child; garbage the
imports left in reference cycles, never collected (frozen, see `serve`); a module that cannot be
found, a traceback here where `python -m` prints one line (both exit 1).
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import importlib
import json
import os
import resource
import runpy
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

START_TIMEOUT_S = 120  # the server's imports, on a busy 2-core box
REPLY_GRACE_S = 30  # beyond a case's own timeout, for the server to kill and reap the child
STOP_TIMEOUT_S = 5
ROOT = Path(__file__).resolve().parents[1]
# pyarrow (under pandas) builds in jemalloc, which starts a background purging thread when it
# initializes even though pyarrow allocates with mimalloc here; off, the server stays
# single-threaded. Only the server has it: a child's environment is the case's own.
SERVER_ENV = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}


@dataclass(frozen=True)
class Completed:
    """What subprocess.run's CompletedProcess gives a case: the exit code and the two outputs."""

    returncode: int
    stdout: str
    stderr: str


class ZygoteFailed(RuntimeError):
    """The server could not start, died, or broke the protocol."""


# ------------------------------------------------------------------------------ the server


def serve(workdir: Path, modules: Sequence[str]) -> int:
    """Import `modules`, then answer requests from stdin until it closes."""
    # Replies go to a private copy of fd 1; whatever the imports print on fd 1 goes to the log
    # (fd 2), never into the protocol.
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for name in modules:
        importlib.import_module(name)
    threads = _threads()
    if threads != 1:  # a forked child would hold copies of locks other threads may have held
        _answer(reply, {"error": f"the server has {threads} threads after its imports; needs 1"})
        return 1
    # Objects made by the imports are never freed; frozen, a child's collections skip them
    # instead of touching (and so copying) every page they sit on.
    gc.collect()
    gc.freeze()
    _answer(reply, {"ready": True, "pid": os.getpid()})
    for number, line in enumerate(sys.stdin):
        _answer(reply, _serve_one(json.loads(line), workdir / str(number), reply.fileno()))
    return 0


def _answer(reply: IO[str], message: Mapping[str, object]) -> None:
    reply.write(json.dumps(message) + "\n")
    reply.flush()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _serve_one(request: dict[str, Any], stem: Path, reply_fd: int) -> dict[str, object]:
    out, err = stem.with_suffix(".out"), stem.with_suffix(".err")
    if _threads() != 1:
        return {"error": f"the server has {_threads()} threads; it forks only with 1"}
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request, out, err, reply_fd)
    returncode, timed_out = _wait(pid, float(request["timeout"]))
    answer: dict[str, object] = {"returncode": returncode, "timed_out": timed_out}
    answer["stdout"], answer["stderr"] = _take(out), _take(err)
    return answer


def _take(path: Path) -> str:
    """The output as subprocess.run(text=True) decodes it (UTF-8, universal newlines); none
    when the child ended before it opened the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    path.unlink()
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code (negative: the signal that ended it), and whether it timed out."""
    pidfd = os.pidfd_open(pid)
    try:
        ended, _, _ = select.select([pidfd], [], [], timeout)
        if not ended:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(status), not ended


def _child(request: dict[str, Any], out: Path, err: Path, reply_fd: int) -> NoReturn:
    code = 1
    try:
        os.close(reply_fd)
        _redirect(out, err)
        limit = int(request["as_limit"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_case(request)
    except BaseException:  # setting the case up failed: say how, as an interpreter would
        traceback.print_exc()
    finally:
        _flush()
        os._exit(code)


def _redirect(out: Path, err: Path) -> None:
    """stdin from /dev/null (never the server's requests), stdout and stderr into the files."""
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (fd 0 lasts as long as the child)


def _run_case(request: dict[str, Any]) -> int:
    """Run the code or the module; the exit code the interpreter would end with."""
    try:
        if request["kind"] == "py":
            _exec_code(request["code"])
        else:
            _run_module(request["argv"])
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException as exc:
        tb = _case_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    _finalize()
    return code


def _case_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback from the case's own first frame on, as the interpreter would print it."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def _exec_code(code: str) -> None:
    """`python -c code`: a fresh __main__, argv ['-c'], the working directory first on the path."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    sys.path[0] = ""
    exec(compile(code, "<string>", "exec"), main.__dict__)


def _run_module(argv: list[str]) -> None:
    """`python -m module args`: runpy puts the module's file in argv[0]; the path starts with
    the working directory. A fresh interpreter has not imported the module it runs; if the
    server's imports did, it goes (runpy would warn on stderr that it was imported first)."""
    for name in (argv[0], f"{argv[0]}.__main__"):
        if not hasattr(sys.modules.get(name), "__path__"):  # a package stays
            sys.modules.pop(name, None)
    sys.argv = ["-m", *argv[1:]]
    sys.path[0] = os.getcwd()
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


def _exit_code(code: object) -> int:
    """SystemExit's argument as the interpreter reads it: None is 0, an int itself, anything
    else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _finalize() -> None:
    """The interpreter's own exit: wait for non-daemon threads, then run the exit handlers."""
    getattr(threading, "_shutdown")()  # noqa: B009 (private: typeshed has no name for it)
    atexit._run_exitfuncs()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say
            stream.flush()


# ------------------------------------------------------------------------------ the client


class Zygote:
    """One server, started by the first case that needs it and stopped by `stop`.

    `server_env` gives the server's environment when it starts: the cases' own, without any one
    case's additions (the imports would keep what they read of those)."""

    def __init__(self, modules: Sequence[str], server_env: Callable[[], Mapping[str, str]]) -> None:
        self.modules = tuple(modules)
        self.server_env = server_env
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None

    def run(
        self, cmd: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float, as_limit: int
    ) -> Completed:
        """Run `cmd` (`python -c CODE` or `python -m MODULE args...`) in a forked child;
        subprocess.TimeoutExpired when it outlives `timeout`, as subprocess.run raises."""
        request: dict[str, object] = {
            "env": dict(env),
            "cwd": str(cwd),
            "timeout": timeout,
            "as_limit": as_limit,
            **_parse(cmd),
        }
        proc = self._started()
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        answer = self._read(timeout + REPLY_GRACE_S)
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(list(cmd), timeout, answer["stdout"], answer["stderr"])
        return Completed(answer["returncode"], answer["stdout"], answer["stderr"])

    def stop(self) -> None:
        """Close its requests (it exits at their end), kill its process group by its PID if it
        lingers, remove its folder."""
        proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session)
                proc.wait()
            proc.stdout.close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self.stop()
        self._workdir = Path(tempfile.mkdtemp(prefix="zygote-"))
        log = self._workdir / "zygote.log"
        with log.open("wb") as log_file:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.zygote", str(self._workdir), *self.modules],
                cwd=ROOT,
                env={**self.server_env(), **SERVER_ENV},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                start_new_session=True,
            )
        self._read(START_TIMEOUT_S)
        # A fresh interpreter would print whatever the imports print into every case's stderr.
        printed = log.read_text()
        if printed:
            self.stop()
            raise ZygoteFailed(f"the server's imports printed:\n{printed}")
        return self._proc

    def _read(self, timeout: float) -> dict[str, Any]:
        proc, workdir = self._proc, self._workdir
        assert proc is not None and proc.stdout is not None and workdir is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else b""
        answer: dict[str, Any] = json.loads(line) if line else {}
        if not line:
            answer["error"] = "the server ended" if ready else f"no answer within {timeout:.0f} s"
        if "error" in answer:
            log = (workdir / "zygote.log").read_text()[-3000:]
            self.stop()
            raise ZygoteFailed(f"{answer['error']}; its log:\n{log}")
        return answer


def _parse(cmd: Sequence[str]) -> dict[str, object]:
    """The request for `python -c CODE` or `python -m MODULE args...`."""
    if len(cmd) == 3 and cmd[1] == "-c":
        return {"kind": "py", "code": cmd[2]}
    if len(cmd) >= 3 and cmd[1] == "-m":
        return {"kind": "module", "argv": list(cmd[2:])}
    raise ValueError(f"a zygote runs `python -c CODE` or `python -m MODULE ...`, not {cmd!r}")


if __name__ == "__main__":
    sys.exit(serve(Path(sys.argv[1]), sys.argv[2:]))
