"""Run directories on disk: atomic writes of the result files, and the loaders the report uses.

Every file is written through harness.safe_write (never outside the run directory, never through
a symbolic link) to a temporary sibling, fsynced, then `os.replace`d over the target, so a crash
leaves the previous file or none, never a truncated one. summary.json is written last: a
directory holding it is a finished run (or a recorded failure), which is what `load_runs` finds.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engines.step_log import StepRecord
from harness.identity import RESERVE_FILE, fingerprint, release
from harness.rowlog import count_rows
from harness.safe_write import SafeRoot
from workloads.progress import progress


def _atomic_write(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False, root=None
) -> None:
    """Call `write(file)` on a temporary file next to `path`, then move it into place, through
    the path-safe writer (harness.safe_write) rooted at `root` (default: the file's folder)."""
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
    ROWS: ClassVar[str] = "rows.jsonl"  # harness.rowlog: appended while the run is measured
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
        """The path-safe writer of this directory (harness.safe_write)."""
        return SafeRoot(self.path)

    def remove(self, file: Path) -> None:
        self.safe.remove(file)


def write_failed_summary(run_dir: str | os.PathLike, error: str) -> None:
    """Record a job that could not run, so a sweep's table shows it (docs/benchmarking.md §8.2 status)."""
    date = time.strftime("%Y%m%d-%H%M%S")  # local time, as vLLM and the runner write `date`
    RunDir(Path(run_dir)).write_summary(
        {"status": "failed", "error": error, "date": date, "completed": 0}
    )


def load_run(path: str | os.PathLike) -> tuple[dict, pd.DataFrame, dict]:
    """(summary, requests, manifest) of one run directory.

    summary.json is required; a run that failed before measuring may lack the other two, giving an
    empty table and an empty manifest.
    """
    run = RunDir(Path(path))
    summary = _checked(_read_object(run.summary_path), run.summary_path, SUMMARY_TYPES)
    manifest = (
        _checked(_read_object(run.manifest_path), run.manifest_path, MANIFEST_TYPES)
        if run.manifest_path.exists()
        else {}
    )
    requests = (
        pd.read_parquet(_regular(run.requests_path))
        if run.requests_path.exists()
        else pd.DataFrame()
    )
    return summary, requests, manifest


_NUMBER = (int, float, type(None))
# Fields the report computes with: a value of another type (a hand-edited or corrupted file) makes
# the run unreadable (skipped with a warning naming it) instead of crashing the whole report.
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "completed": _NUMBER,
    "failed": _NUMBER,
    "seed": _NUMBER,
    "duration": (*_NUMBER, str),  # "inf" is how +-inf is written
    "run_id": (str, int, type(None)),
}
MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "config": (dict, type(None)),
    "packages": (dict, type(None)),
    "seed": _NUMBER,
    "config_fingerprint": (str, type(None)),
    "run_id": (str, int, type(None)),
}


def _checked(obj: dict, path: Path, types: Mapping[str, tuple[type, ...]]) -> dict:
    for key, allowed in types.items():
        value = obj.get(key)
        if key in obj and (isinstance(value, bool) or not isinstance(value, allowed)):
            raise ValueError(f"{path}: field {key!r} has type {type(value).__name__}")
    return obj


def _regular(path: Path) -> Path:
    """`path`, unless it is not a regular file (a FIFO would block the reader forever)."""
    from workloads.readers import check_regular

    try:
        check_regular(path, "run file")
    except ValueError as exc:  # workloads' BadInput
        raise OSError(str(exc)) from None
    return path


def _read_object(path: Path) -> dict:
    """A JSON object from a run file: bounded, strict UTF-8, never blocking on a FIFO."""
    from workloads.readers import loads_json, read_text

    value = loads_json(read_text(path, "run file", READ_LIMIT), str(path))
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


READ_LIMIT = 256 * 2**20  # a run's summary or manifest is kilobytes; a larger one is not ours

# Manifest fields copied onto each run's row (the resolved config is flattened as config.*).
MANIFEST_FIELDS = (
    "created_utc",
    "git_sha",
    "git_dirty",
    "device",
    "cpu_model",
    "cuda_device",
    "platform",
    "torch_num_threads",
    "config_fingerprint",
)


def load_runs(root: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, requests) for every run directory below `root`, joined by `run_id`.

    runs: one row per run: `run_id`, `run_dir` (relative to root), the summary's fields (nested
    dicts flattened with dots), MANIFEST_FIELDS, `packages.*` and the resolved config as `config.*`
    (summary fields win over manifest ones of the same name).
    requests: every request table with its run's `run_id`. Directories whose files cannot be read
    are skipped with one warning naming them. Runs that never finished (a rows file, no summary)
    are rows with status `incomplete` and `completed` = their row count; `fingerprint` is the
    manifest's config fingerprint (computed from the config for runs without one).
    """
    root = Path(root)
    runs, tables, bad = [], [], []
    for summary_path in progress(sorted(root.rglob(RunDir.SUMMARY)), "reading runs", "run"):
        run_dir = summary_path.parent
        try:
            summary, requests, manifest = load_run(run_dir)
        except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
            bad.append(f"{run_dir} ({type(exc).__name__})")
            continue
        rel = run_dir.relative_to(root).as_posix()
        run_id = str(summary.get("run_id") or manifest.get("run_id") or rel)
        row = {"run_id": run_id, "run_dir": rel, **_flatten(summary)}
        for key in MANIFEST_FIELDS:
            row.setdefault(key, manifest.get(key))
        row.setdefault("seed", manifest.get("seed"))
        row.update(_flatten(manifest.get("packages") or {}, "packages."))
        config = manifest.get("config") or _hydra_config(run_dir)
        row["fingerprint"] = manifest.get("config_fingerprint") or _fingerprint(config)
        row.update(_flatten(config, "config."))
        runs.append(row)
        if not requests.empty:
            tables.append(
                requests.assign(run_id=pd.Series(run_id, index=requests.index, dtype="string"))
            )
    runs.extend(_incomplete_runs(root))
    if bad:
        warnings.warn(
            f"skipped {len(bad)} unreadable run directories: {', '.join(bad)}", stacklevel=2
        )
    runs_df = pd.DataFrame(runs)
    requests_df = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return runs_df, requests_df


def _incomplete_runs(root: Path) -> list[dict]:
    """Directories whose run never finished (killed: a rows file and no summary), with row counts."""
    out = []
    for rows_path in sorted(root.rglob(RunDir.ROWS)):
        run_dir = rows_path.parent
        if (run_dir / RunDir.SUMMARY).exists():
            continue
        try:
            manifest = (
                _read_object(run_dir / RunDir.MANIFEST)
                if (run_dir / RunDir.MANIFEST).exists()
                else {}
            )
        except (OSError, ValueError):
            manifest = {}
        config = manifest.get("config") or _hydra_config(run_dir)
        if not isinstance(config, dict):
            config = {}
        rel = run_dir.relative_to(root).as_posix()
        try:
            completed = count_rows(rows_path)
        except (OSError, ValueError) as exc:  # a FIFO or a folder in the rows file's place
            warnings.warn(f"skipped {run_dir}: {exc}", stacklevel=2)
            continue
        row = {
            "run_id": rel,
            "run_dir": rel,
            "status": "incomplete",
            "completed": completed,
            "fingerprint": manifest.get("config_fingerprint") or _fingerprint(config),
        }
        row.update(_flatten(config, "config."))
        out.append(row)
    return out


def _fingerprint(config: object) -> str | None:
    """The config's fingerprint for a run that recorded none (its data files may have changed
    since: their contents are left out); None without a config: nothing to compare."""
    if not isinstance(config, Mapping) or not config:
        return None
    return fingerprint(config, data=False)


def _hydra_config(run_dir: Path) -> dict:
    """Hydra's resolved job config, for a run that failed before writing its manifest."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return {}
    import yaml  # PyYAML comes with hydra-core/omegaconf

    from workloads.readers import load_yaml, read_text

    try:
        value = load_yaml(read_text(path, "Hydra config", READ_LIMIT), str(path))
    except (yaml.YAMLError, OSError, ValueError):  # unreadable: the run has no config
        return {}
    return value if isinstance(value, dict) else {}


def _flatten(d: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
