"""Run directories on disk: atomic writes of the result files (the loaders the report uses: harness.results.load).

Every file is written through harness.results.safe_write (never outside the run directory, never through
a symbolic link) to a temporary sibling, fsynced, then `os.replace`d over the target, so a crash
leaves the previous file or none, never a truncated one. summary.json is written last: a
directory holding it is a finished run (or a recorded failure), which is what `load_runs` finds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engines.step_log import StepRecord
from harness.results.identity import RESERVE_FILE, release
from harness.results.safe_write import SafeRoot


def _atomic_write(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False, root=None
) -> None:
    """Call `write(file)` on a temporary file next to `path`, then move it into place, through
    the path-safe writer (harness.results.safe_write) rooted at `root` (default: the file's folder)."""
    path = Path(path)
    SafeRoot(path.parent if root is None else root).write_atomic(path, write, binary)


def write_json(path: str | os.PathLike, obj: object, root=None) -> None:
    """Pretty JSON; NaN/inf are refused (strict JSON), so pass `metrics.json_safe` output."""

    def dump(f: IO[Any]) -> None:
        json.dump(obj, f, indent=2, allow_nan=False)
        f.write("\n")

    _atomic_write(path, dump, root=root)


def write_parquet(path: str | os.PathLike, df: pd.DataFrame, root=None) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    _atomic_write(path, lambda f: pq.write_table(table, f), binary=True, root=root)


def write_tokens_jsonl(
    path: str | os.PathLike, rows: Iterable[Mapping[str, object]], root=None
) -> None:
    """One compact JSON line per request, in the order given (arrival order, see metrics.token_rows)."""

    def write(f: IO) -> None:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":"), allow_nan=False))
            f.write("\n")

    _atomic_write(path, write, root=root)


@dataclass(frozen=True)
class RunDir:
    """One run's directory and its file names; writing creates the directory if needed."""

    path: Path
    REQUESTS: ClassVar[str] = "requests.parquet"
    SUMMARY: ClassVar[str] = "summary.json"
    MANIFEST: ClassVar[str] = "manifest.json"
    TOKENS: ClassVar[str] = "tokens.jsonl"
    ROWS: ClassVar[str] = "rows.jsonl"  # harness.results.rowlog: appended while the run is measured
    STEPS: ClassVar[str] = "steps.jsonl"  # engine.step_log: one line per engine step

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def requests_path(self) -> Path:
        return self.path / self.REQUESTS

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def manifest_path(self) -> Path:
        return self.path / self.MANIFEST

    @property
    def tokens_path(self) -> Path:
        return self.path / self.TOKENS

    @property
    def rows_path(self) -> Path:
        return self.path / self.ROWS

    @property
    def steps_path(self) -> Path:
        return self.path / self.STEPS

    def write_requests(self, df: pd.DataFrame) -> None:
        write_parquet(self._ready(self.requests_path), df, self.path)

    def write_tokens(self, rows: Iterable[Mapping[str, object]]) -> None:
        write_tokens_jsonl(self._ready(self.tokens_path), rows, self.path)

    def write_steps(self, steps: Iterable[StepRecord]) -> None:
        """The engine's step log (warm-up steps included, indexed from the warm-up's first)."""
        write_tokens_jsonl(
            self._ready(self.steps_path), (step.as_row() for step in steps), self.path
        )

    def write_manifest(self, manifest: Mapping[str, object]) -> None:
        write_json(self._ready(self.manifest_path), manifest, self.path)

    def write_summary(self, summary: Mapping[str, object]) -> None:
        """Write this last: it marks the directory as a run for `load_runs`. The space the claim
        kept aside (identity.RESERVE_FILE) is freed first, so a full disk still gets a summary."""
        self.safe.remove(self.path / RESERVE_FILE)
        try:
            write_json(self._ready(self.summary_path), summary, self.path)
        finally:
            release(self.path)  # the run is over: another may take the directory now

    def _ready(self, file: Path) -> Path:
        self.safe.mkdir()
        return file

    @property
    def safe(self) -> SafeRoot:
        """The path-safe writer of this directory (harness.results.safe_write)."""
        return SafeRoot(self.path)

    def remove(self, file: Path) -> None:
        self.safe.remove(file)


def write_failed_summary(run_dir: str | os.PathLike, error: str) -> None:
    """Record a job that could not run, so a sweep's table shows it (docs/benchmarking.md §8.2 status)."""
    date = time.strftime("%Y%m%d-%H%M%S")  # local time, as vLLM and the runner write `date`
    RunDir(Path(run_dir)).write_summary(
        {"status": "failed", "error": error, "date": date, "completed": 0}
    )
