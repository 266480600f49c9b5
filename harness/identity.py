"""Run identity: fresh run directories, claiming one for a single run, and the config fingerprint.

A default run directory name carries the time to the microsecond, the workload, the engine and the
seed, and is created with an atomic `mkdir` (a suffix -1, -2, ... on a collision) by the
`fresh_dir` resolver. A run then claims its directory by creating the append-only rows file with
O_EXCL: a second run pointed at the same directory, or at one holding a finished run's results,
is refused unless `overwrite=true`. The fingerprint hashes the resolved config without the seed
and output settings: runs with equal fingerprints differ only by seed, and the report never
groups runs with different fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from omegaconf import OmegaConf

from harness.errors import BadInput

# Resolved-config keys that do not change what is measured: the seed varies within a group, the
# others say where and how results are kept.
NOT_FINGERPRINTED = ("seed", "overwrite", "save_tokens")
# Files that mark a directory as holding a run's results.
RESULT_FILES = ("summary.json", "requests.parquet", "rows.jsonl", "manifest.json", "tokens.jsonl")


def fingerprint(config: Mapping[str, object]) -> str:
    """12 hex digits of SHA-256 over the canonical JSON of the config minus NOT_FINGERPRINTED."""
    kept = {k: v for k, v in config.items() if k not in NOT_FINGERPRINTED}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def fresh_dir(path: str) -> str:
    """Create `path` (or `path-1`, `path-2`, ... if taken) atomically and return its name."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    for i in range(10_000):
        candidate = base if i == 0 else base.with_name(f"{base.name}-{i}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return str(candidate)
    raise BadInput(f"hydra.run.dir: no free name next to {path!r}")


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")
MAX_DIR_NAME = 120


def dir_name(text: object) -> str:
    """A job folder name from Hydra's override_dirname: a `/` (as in `+suite/arm=radix`) or any
    other character a path would misread becomes `_`, and long names are cut (the job number in
    front keeps them unique)."""
    return _UNSAFE.sub("_", str(text)).strip("._")[:MAX_DIR_NAME] or "job"


def abba_on(seed: int, slot: int) -> bool:
    """Caching on in `slot` (0 or 1) of a seed's on/off pair: on first for even seeds, off first for
    odd ones, so consecutive pairs run A B, B A (the overhead suite's ABBA order)."""
    return (int(seed) + int(slot)) % 2 == 0


def register_resolver() -> None:
    """`${fresh_dir:...}` in conf/config.yaml (cached, so Hydra's repeated reads get one
    directory), `${dir_name:...}` (its sweep subdir) and `${abba_on:seed,slot}` in
    conf/suite/abba/."""
    if not OmegaConf.has_resolver("fresh_dir"):
        OmegaConf.register_new_resolver("fresh_dir", fresh_dir, use_cache=True)
    if not OmegaConf.has_resolver("abba_on"):
        OmegaConf.register_new_resolver("abba_on", abba_on)
    if not OmegaConf.has_resolver("dir_name"):
        OmegaConf.register_new_resolver("dir_name", dir_name)


def holds_results(run_dir: Path) -> list[str]:
    return [name for name in RESULT_FILES if (run_dir / name).exists()]


def claim(run_dir: Path, rows_name: str, overwrite: bool) -> Path:
    """Make `run_dir` this run's: create its rows file exclusively; returns the rows file's path.

    Refused (BadInput) when the directory holds another run's results, unless `overwrite`, which
    removes them first. Two runs racing for one directory: exactly one creates the rows file.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    found = holds_results(run_dir)
    if found and not overwrite:
        raise BadInput(
            f"hydra.run.dir: {str(run_dir)!r} holds another run's results ({', '.join(found)}); "
            "choose another directory or pass overwrite=true"
        )
    for name in found:
        (run_dir / name).unlink(missing_ok=True)
    rows = run_dir / rows_name
    try:
        fd = os.open(rows, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise BadInput(f"hydra.run.dir: another run is writing into {str(run_dir)!r}") from None
    os.close(fd)
    return rows
