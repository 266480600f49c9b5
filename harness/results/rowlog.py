"""The append-only rows file: one JSON line per finished request, written as it finishes.

A run killed by SIGKILL or the OOM killer runs no handler; whatever reached this file survives, so
only the last request's line can be lost (a partial last line is skipped on reading). At the end of
a run the rows become requests.parquet and the file is removed; a directory that still holds it
without a summary is a run that never finished (the report lists it as `incomplete`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from harness.results.columns import COLUMNS
from harness.results.json_safe import json_safe
from harness.results.safe_write import SafeRoot


class RowLog:
    """Appends rows to an already claimed file (harness.results.identity.claim_run_dir creates it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = SafeRoot(path.parent).open_append(path)  # O_NOFOLLOW: never through a link

    def append(self, row: Mapping[str, object]) -> None:
        self._file.write(json.dumps(json_safe(row), separators=(",", ":")) + "\n")
        self._file.flush()  # to the OS: a killed process keeps it; fsync would only add power loss

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a full disk: the rows on disk are what the run keeps
            self._file.close()


def read_rows(path: Path) -> list[dict]:
    """Every complete line; a truncated last line (the process died mid-write) is skipped."""
    from workloads.readers import open_regular  # never blocks on a FIFO; a regular file only

    rows = []
    with open_regular(path, "rows file") as f:
        for raw in f:
            try:
                row = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):  # a half-written or corrupted line
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def count_rows(path: Path) -> int:
    return len(read_rows(path)) if path.exists() else 0


def rows_table(path: Path) -> pd.DataFrame:
    """The rows file as a request table (the dtypes of harness.results.columns.COLUMNS), arrival order."""
    df = pd.DataFrame(read_rows(path), columns=list(COLUMNS)).astype(COLUMNS)
    return df.sort_values(
        ["arrival_s", "request_index", "sample_index"], kind="stable"
    ).reset_index(drop=True)
