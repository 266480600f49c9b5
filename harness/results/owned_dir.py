"""Output folders a command owns: checked before any work, and only its own contents removed.

`python -m harness.claims` replaces its `runs/` folder on every invocation; a folder of that name
it did not create (a user's `~/runs` under `--out ~`) must survive. The command leaves a marker
file in each folder it creates and removes a folder only when the marker is there. An `--out`
that is a file, unwritable or read-only is one `error:` line before anything runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.config.errors import BadInput

MARKER = ".made-by-prefixbench"


def check_out_dir(flag: str, path: Path) -> None:
    """BadInput unless `path` can be (or already is) a writable directory."""
    from harness.config.preflight import unusable_dir

    problem = unusable_dir(str(path))
    if problem:
        raise BadInput(f"{flag}: {problem}")


def replace_owned(folder: Path, owner: str) -> None:
    """Remove `folder` if `owner` made it (its marker is there), then make it afresh, marked.

    A folder (or a link, or a file) of that name without the marker is refused, untouched."""
    if folder.is_symlink() or (folder.exists() and not (folder / MARKER).is_file()):
        raise BadInput(
            f"{folder} exists and was not made by {owner}; it is left alone: choose another "
            f"--out or move it away"
        )
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / MARKER).write_text(f"made by {owner}; removed and remade on its next run\n")


def out_and_overrides_problem(out: Path, overrides: list[str]) -> str | None:
    """One line for an unusable `--out` folder or bad Hydra overrides (the run's preflight)."""
    from harness.config.errors import BAD_INPUT
    from harness.config.preflight import preflight

    try:
        check_out_dir("--out", out)
    except BAD_INPUT as exc:
        return str(exc)
    return preflight(list(overrides))
