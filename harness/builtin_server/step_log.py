"""The server's step log: one entry per engine step, which requests it held and their new tokens.

Continuous batching makes the batches a burst of requests runs in depend on timing; the log is
what a concurrency test or the harness's server target reads to see them (GET /step_log, and a
JSON-lines file when `step_log` names one). Entries come from the engine's own step records
(engines/step_log.py: kind, scheduled requests, preemptions), with the run clock added; the
last `size` stay in memory. A write that fails (a full disk) raises OSError to the engine thread,
which fails that step's requests; nothing stays buffered, and the next write that succeeds first
ends a line the failed one may have cut short.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class StepEntry:
    step: int  # the engine's step index since the server started
    end_s: float  # run clock after the step
    kind: str  # prefill | decode | mixed
    requests: list[tuple[str, int]]  # (child request id, tokens computed for it in the step)
    preempted: list[str]  # preempted (vLLM) or retracted (SGLang) while the step was planned


class StepLog:
    def __init__(self, size: int, path: str | None = None) -> None:
        self._entries: deque[StepEntry] = deque(maxlen=size)
        self._lock = threading.Lock()  # appended on the engine thread, read on the event loop
        # Open for the server's lifetime (closed by `close`), unbuffered: one write a step.
        self._fd = (
            os.open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else -1
        )
        self._torn = False  # a failed write may have left part of a line
        self.error: str | None = None  # the last write's failure, None once one succeeds

    def append(self, entry: StepEntry) -> None:
        """Keep `entry`; write its line to the file (OSError if that fails, e.g. a full disk)."""
        with self._lock:
            self._entries.append(entry)
        if self._fd < 0:
            return
        data = (json.dumps(asdict(entry)) + "\n").encode()
        try:
            self._write((b"\n" if self._torn else b"") + data)
        except OSError as exc:
            self._torn, self.error = True, f"{exc.strerror or exc}"
            raise
        self._torn, self.error = False, None

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def since(self, step: int) -> list[StepEntry]:
        with self._lock:
            return [e for e in self._entries if e.step >= step]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
