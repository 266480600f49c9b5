"""The fast tiers' promise, enforced: a test under tests/unit starts no process and opens no
network socket; one under tests/run (in-process harness runs) starts no process. What needs either
belongs in tests/live. The guard wraps the process and socket entry points once, at import, and
consults the tier of the test being run (set by tests/conftest.py around each test's setup, call
and teardown), so module-scoped fixtures are guarded too.
"""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TIERS = ("unit", "run", "live")
_NO_PROCESS = frozenset({"unit", "run"})
_NO_NETWORK = frozenset({"unit"})
_INET = (socket.AF_INET, socket.AF_INET6)
_current: list[str | None] = [None]


class TierViolation(RuntimeError):
    """A fast-tier test reached for a process or a socket."""


def _refuse(what: str) -> None:
    tier = _current[0]
    raise TierViolation(
        f"tests/{tier} {what}: move the test to tests/live (tests/tier_guard.py says why)"
    )


def _no_process(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _current[0] in _NO_PROCESS:
            _refuse(f"starts no process ({what})")
        return original(*args, **kwargs)

    return wrapper


def _no_network(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    def wrapper(sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        if _current[0] in _NO_NETWORK and sock.family in _INET:
            _refuse(f"opens no network socket ({what})")
        return original(sock, *args, **kwargs)

    return wrapper


subprocess.Popen.__init__ = _no_process(subprocess.Popen.__init__, "subprocess")  # type: ignore[method-assign]
multiprocessing.process.BaseProcess.start = _no_process(  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start, "multiprocessing"
)
os.fork = _no_process(os.fork, "os.fork")
for _name in ("bind", "connect", "connect_ex"):
    setattr(socket.socket, _name, _no_network(getattr(socket.socket, _name), f"socket.{_name}"))


@contextmanager
def guarded(tier: str | None) -> Iterator[None]:
    """Run the enclosed code as a test of `tier` (None: no guard)."""
    before, _current[0] = _current[0], tier
    try:
        yield
    finally:
        _current[0] = before
