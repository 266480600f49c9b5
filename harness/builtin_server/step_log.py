"""The server's step log: one entry per engine step, which requests it held and their new tokens.

Continuous batching makes the batches a burst of requests runs in depend on timing; the log is
what a concurrency test or the harness's server target reads to see them (GET /step_log, and a
JSON-lines file when `step_log` names one). Entries come from the engine's own step records
(engines/step_log.py: kind, scheduled requests, preemptions), with the run clock added; the
last `size` stay in memory.
"""

from __future__ import annotations

import json
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
        # Open for the server's lifetime (closed by `close`), one line flushed a step.
        self._file = Path(path).open("a", encoding="utf-8") if path else None  # noqa: SIM115

    def append(self, entry: StepEntry) -> None:
        with self._lock:
            self._entries.append(entry)
        if self._file is not None:
            self._file.write(json.dumps(asdict(entry)) + "\n")
            self._file.flush()

    def since(self, step: int) -> list[StepEntry]:
        with self._lock:
            return [e for e in self._entries if e.step >= step]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
