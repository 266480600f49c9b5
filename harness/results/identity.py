"""Run identity: claiming a run directory for a single run, and the config fingerprint.

A default run directory name carries the time to the microsecond, the workload, the engine and the
seed, and is created with an atomic `mkdir` (a suffix -1, -2, ... on a collision) by the
`fresh_dir` resolver (harness/config/run_dirs.py). A run then claims its directory: it takes the directory's lock (flock, held
until the process ends; an explicit hydra.run.dir is locked before Hydra writes into it) and
creates the append-only rows file with O_EXCL. A second run pointed at a directory in use is
refused, overwrite=true included; one holding a finished run's results is refused unless
`overwrite=true`. The fingerprint hashes the resolved config without the seed
and output settings, plus the contents of the data files it names: runs with equal fingerprints
differ only by seed, and the report never groups runs with different fingerprints. A run without
a config has no fingerprint (the report lists it as `unknown`, alone, never averaged).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from harness.config.errors import BadInput
from harness.config.run_dirs import RESULT_FILES, created_dirs, holds_results
from harness.results.safe_write import SafeRoot

# Resolved-config keys that do not change what is measured: the seed varies within a group, the
# others say where and how results are kept.
NOT_FINGERPRINTED = ("seed", "overwrite", "save_tokens")


def fingerprint(config: Mapping[str, object], data: bool = True) -> str:
    """12 hex digits of SHA-256 over the canonical JSON of the config minus NOT_FINGERPRINTED and,
    with `data`, the SHA-256 of each data file the config names (data_digests): a trace edited in
    place is another configuration, although its path is the same."""
    kept = {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED}
    if data:
        kept["data_sha256"] = data_digests(config)
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


DATA_KEYS = ("path", "tokenizer")  # workload fields that may name a file


def data_digests(config: Mapping[str, object]) -> dict[str, str]:
    """workload.<key> -> SHA-256 of the file it names (looked up as the workload does); fields
    that name no readable regular file (a built-in tokenizer name) are left out."""
    from workloads.base import resolve_data_path
    from workloads.errors import BadInput as WorkloadBadInput
    from workloads.readers import open_regular

    workload = config.get("workload")
    out: dict[str, str] = {}
    if not isinstance(workload, Mapping):
        return out
    for key in DATA_KEYS:
        value = workload.get(key)
        if not isinstance(value, str) or not value:
            continue
        try:
            path = resolve_data_path(value, f"workload.{key}")
            if path.is_dir():
                path = path / "tokenizer.json"
            digest = hashlib.sha256()
            with open_regular(path, f"workload.{key}") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        except (WorkloadBadInput, OSError):
            continue
        out[f"workload.{key}"] = digest.hexdigest()
    return out


def claim_run_dir(run_dir: Path, rows_name: str, overwrite: bool) -> Path:
    """Make `run_dir` this run's: hold its lock, create its rows file exclusively; returns the
    rows file's path.

    Refused (BadInput) while another live process holds the directory's lock (overwrite=true
    included: that run is still measuring), and when the directory holds another run's results,
    unless `overwrite`, which removes them first. Two runs racing for one directory: exactly one
    gets the lock and creates the rows file.
    """
    hold(run_dir)
    found = holds_results(run_dir)
    if found and not overwrite:
        raise BadInput(
            f"hydra.run.dir: {str(run_dir)!r} holds another run's results ({', '.join(found)}); "
            "choose another directory or pass overwrite=true"
        )
    safe = SafeRoot(run_dir)
    for name in found:
        safe.remove(run_dir / name)
    # Room for the summary kept aside first: a disk that fills up at any point after the rows
    # file exists still gets a summary (RunDir.write_summary removes this file first).
    try:
        safe.write_atomic(
            run_dir / RESERVE_FILE, lambda f: f.write(b"\0" * RESERVE_BYTES), binary=True
        )
    except OSError as exc:
        raise BadInput(
            f"hydra.run.dir: cannot write into {str(run_dir)!r}: {exc.strerror}"
        ) from None
    rows = run_dir / rows_name
    try:
        safe.open_append(rows, exclusive=True).close()
    except FileExistsError:
        raise BadInput(f"hydra.run.dir: another run is writing into {str(run_dir)!r}") from None
    return rows


RESERVE_FILE = ".summary-reserve"
RESERVE_BYTES = 256 * 2**10


LOCK_FILE = ".lock"
_held: dict[str, int] = {}  # run dir -> descriptor of its locked lock file


def hold(run_dir: Path) -> None:
    """Take `run_dir`'s lock (flock on its lock file, held until the run's summary is written or
    this process ends, however it ends); again from the same process is a no-op. BadInput while
    another process holds it."""
    key = os.path.abspath(run_dir)
    if key in _held:
        return
    safe = SafeRoot(run_dir)
    if not os.path.lexists(run_dir):
        created_dirs.add(key)
    safe.mkdir()
    for name in (".hydra", "harness.log"):  # Hydra writes these with plain open(): no links
        safe.check(run_dir / name)
    f = safe.open_append(run_dir / LOCK_FILE)
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise BadInput(
            f"hydra.run.dir: {str(run_dir)!r} is held by another live run; wait for it to end "
            "or choose another directory (overwrite=true never takes a directory in use)"
        ) from None
    _held[key] = os.dup(f.fileno())  # the lock lives on the open file description
    f.close()


def release(run_dir: Path) -> None:
    """Let go of `run_dir`'s lock (its summary is written: the run is over). A no-op when this
    process does not hold it."""
    fd = _held.pop(os.path.abspath(run_dir), None)
    if fd is not None:
        os.close(fd)  # closing the last descriptor of the description drops the flock


HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra writes in .hydra/


def discard_run_dir(run_dir: Path) -> bool:
    """Undo the claim of a run refused as bad input before it measured anything, so that no
    failed run folder is left for every later report to count: the claim's files go, and a
    folder this process made goes whole (Hydra's .hydra/ and log with it). A folder that was
    already there keeps everything else. Returns True when the folder is gone."""
    release(run_dir)
    key = os.path.abspath(run_dir)
    mine = key in created_dirs
    safe = SafeRoot(run_dir)
    names = [*RESULT_FILES, RESERVE_FILE, LOCK_FILE]
    if mine:
        names += ["harness.log", *(f".hydra/{name}" for name in HYDRA_FILES)]
    for name in names:
        try:
            safe.remove(run_dir / name)
        except (BadInput, OSError):  # a link or a folder planted there: left alone
            continue
    if not mine:
        return False
    for folder in (run_dir / ".hydra", run_dir):
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            folder.rmdir()  # only when empty: anything else put there stays
        except OSError:
            return False
    created_dirs.discard(key)
    return True


def claim_before_hydra(argv: list[str]) -> str | None:
    """Lock an explicit `hydra.run.dir` before Hydra writes its .hydra/ files and log into it:
    the loser of two runs started on one directory stops here, leaving the winner's files alone.
    Returns the problem as one line, or None (sweeps and default directories: fresh ones)."""
    if any(a in ("-m", "--multirun") or a.lstrip("+").startswith("suite=") for a in argv):
        return None
    values = [a.partition("=")[2] for a in argv if a.startswith("hydra.run.dir=")]
    if not values or not values[-1].strip():
        return None
    try:
        hold(Path(values[-1]))
    except BadInput as exc:
        return str(exc)
    return None
