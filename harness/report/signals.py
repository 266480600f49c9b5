"""SIGTERM (and SIGHUP) as an exception while the report writes, so every exit path cleans up.

Python's default SIGTERM ends the process at once and leaves the temporary sibling of the file
being written; raised as `Terminated` instead, `SafeRoot.write_atomic` removes it on the way out.
SIGKILL runs nothing: the next report removes what it left (harness/results/stale_temps.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """The process was asked to stop (a BaseException: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise Terminated in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
