"""Stopping an SGLang server a live test started (tests/live/test_sglang_server*.py)."""

from __future__ import annotations

import os
import signal
import time


def stop_sglang(pid: int | None) -> None:
    """SIGTERM: SGLang's launcher ends its scheduler and detokenizer processes with itself;
    SIGKILL if it is still there after 30 s."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
