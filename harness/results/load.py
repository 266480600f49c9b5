"""Loading run directories back: one run's (summary, requests, manifest), and every run below a
folder as the report's tables. A hand-edited or corrupted file makes its run unreadable (skipped
with a warning naming it), never the whole report."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pyarrow as pa

from harness.results.identity import fingerprint
from harness.results.rowlog import count_rows
from harness.results.run_dir import RunDir
from workloads.progress import progress


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
