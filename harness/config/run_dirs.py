"""Run folders as conf/ names them: the Hydra resolvers of conf/config.yaml's run and sweep folders
(`fresh_dir`, `run_target`, `dir_name`) and of conf/suite/abba/ (`abba_on`), registered when the
schema is imported, and the files that mark a folder as holding a run's results. They sit on the
config floor because the preflight refuses such a folder before Hydra writes into it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from omegaconf import OmegaConf

from harness.config.errors import BadInput

# Files that mark a directory as holding a run's results.
RESULT_FILES = ("summary.json", "requests.parquet", "rows.jsonl", "manifest.json", "tokens.jsonl")
created_dirs: set[str] = set()  # run directories this process made (fresh_dir, identity.hold)


def holds_results(run_dir: Path) -> list[str]:
    return [name for name in RESULT_FILES if (run_dir / name).exists()]


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
        created_dirs.add(os.path.abspath(candidate))
        return str(candidate)
    raise BadInput(f"hydra.run.dir: no free name next to {path!r}")


_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")
MAX_DIR_NAME = 120


def dir_name(text: object) -> str:
    """A job folder name from Hydra's override_dirname: a `/` (as in `+suite/arm=radix`) or any
    other character a path would misread becomes `_`, and long names are cut (the job number in
    front keeps them unique)."""
    return _UNSAFE.sub("_", str(text)).strip("._")[:MAX_DIR_NAME] or "job"


def run_target(engine: object, server: object) -> str:
    """The target part of a default run folder's name: `vllm-server` for a run against a live
    server (`server=vllm`), else the engine (`apc`); a server run's engine only picks its twin."""
    if server is None or str(server) in ("", "None", "null"):
        return str(engine)
    return f"{server}-server"


def abba_on(seed: int, slot: int) -> bool:
    """Caching on in `slot` (0 or 1) of a seed's on/off pair: on first for even seeds, off first for
    odd ones, so consecutive pairs run A B, B A (the overhead suite's ABBA order)."""
    return (int(seed) + int(slot)) % 2 == 0


def register_resolvers() -> None:
    """`${fresh_dir:...}` in conf/config.yaml (cached, so Hydra's repeated reads get one
    directory), `${run_target:...}` (its name's target), `${dir_name:...}` (its sweep subdir) and
    `${abba_on:seed,slot}` in conf/suite/abba/ (idempotent)."""
    if not OmegaConf.has_resolver("fresh_dir"):
        OmegaConf.register_new_resolver("fresh_dir", fresh_dir, use_cache=True)
    if not OmegaConf.has_resolver("abba_on"):
        OmegaConf.register_new_resolver("abba_on", abba_on)
    if not OmegaConf.has_resolver("dir_name"):
        OmegaConf.register_new_resolver("dir_name", dir_name)
    if not OmegaConf.has_resolver("run_target"):
        OmegaConf.register_new_resolver("run_target", run_target)
