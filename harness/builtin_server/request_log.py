"""The server's request log: one JSON line per finished completion (`request_log=FILE`), with
the server's id, the id the client sent in its `X-Request-Id` header, the times, and the prompt,
cached and output tokens the reply's usage reports. `python -m harness.report --import CLIENT
PATH --server-log FILE` joins a client's rows to these by that id (docs/interop.md §7), so an
imported run carries the server's cached tokens beside the client's timing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)
CLIENT_ID_HEADER = "x-request-id"  # vLLM's name (its serving layer reads the same header)


@dataclass(frozen=True)
class RequestRecord:
    request_id: str  # the server's completion id (each reply's `id`)
    client_request_id: str | None  # the client's X-Request-Id header, None when it sent none
    arrival_unix_s: float  # the handler's start (wall clock)
    finish_unix_s: float  # the last token's event
    prompt_tokens: int
    cached_tokens: int  # as the reply's usage reports them (prompt_tokens_details.cached_tokens)
    output_tokens: int  # all samples'


class RequestLog:
    """Appends records to a file opened for the server's lifetime; a write that fails (a full
    disk) is one warning and drops that line: the reply the client is owed matters more."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(Path(path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()  # one line per write, whichever thread writes it
        self.failed = 0

    def append(self, record: RequestRecord) -> None:
        data = (json.dumps(asdict(record), ensure_ascii=True) + "\n").encode()
        with self._lock:
            if self._fd < 0:
                return
            try:
                os.write(self._fd, data)  # one small O_APPEND write: the line lands whole
            except OSError as exc:
                self.failed += 1
                if self.failed == 1:
                    log.warning("request_log: a line was not written: %s", exc.strerror or exc)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
