"""The one writer for run directories and the report: nothing is written outside its root.

Every file of a run (summary, manifest, requests, tokens, the rows file, harness.log) and of the
report (CSV tables, figures) goes through `SafeRoot`. A target must lie below the root, no
component from the root down (the root included) may be a symbolic link, the parent's resolved
path must be the root's resolved path plus the relative parent, and the final open uses
O_NOFOLLOW: a planted `summary.csv -> ~/.bashrc` or a `figures -> /etc` link is refused with one
line instead of overwriting its target. Whole files are written to a temporary sibling, fsynced
and renamed over the target, so a crash or a full disk leaves the previous file or none (and, on
SIGKILL, a temporary sibling that harness/results/stale_temps.py removes later).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO

from harness.config.errors import BadInput
from harness.results.stale_temps import temp_prefix

FILE_MODE = 0o644


class UnsafePath(BadInput):
    """A write that would leave its root or follow a symbolic link."""


class SafeRoot:
    """Writes below one root directory (a run directory, a report folder)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(os.path.abspath(root))

    # ---------------------------------------------------------------- checks
    def check(self, target: str | os.PathLike) -> Path:
        """`target` as an absolute path, refused unless it lies below the root through no link."""
        path = Path(os.path.abspath(target))
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            raise UnsafePath(f"{path}: outside the results folder {self.root}") from None
        if ".." in rel.parts:
            raise UnsafePath(f"{path}: '..' in a results path")
        current = self.root
        for part in ("", *rel.parts):
            current = current / part if part else current
            if current.is_symlink():
                raise UnsafePath(
                    f"{current} is a symbolic link; results are never written through one"
                )
        if rel.parts and self.root.exists() and path.parent.exists():
            expected = Path(os.path.realpath(self.root)) / rel.parent
            if Path(os.path.realpath(path.parent)) != expected:
                raise UnsafePath(f"{path}: its folder resolves outside {self.root}")
        return path

    def mkdir(self, target: str | os.PathLike | None = None) -> Path:
        """Create the root (and `target` below it) as real directories, refusing links."""
        path = self.check(self.root if target is None else target)
        rel = path.relative_to(self.root)
        current = self.root
        for part in ("", *rel.parts):
            current = current / part if part else current
            with contextlib.suppress(FileExistsError):
                current.mkdir(parents=not part)
            mode = os.lstat(current).st_mode
            if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
                raise UnsafePath(f"{current} exists and is not a directory")
        return path

    # ---------------------------------------------------------------- writes
    def write_atomic(
        self, target: str | os.PathLike, write: Callable[[IO], object], binary: bool = False
    ) -> Path:
        """Call `write(file)` on a temporary sibling of `target`, then rename it into place."""
        path = self.check(target)
        self.mkdir(path.parent)
        # The writer's PID in the name: a later report removes only the ones of a dead writer.
        # The name is chosen before the file exists and the file is created inside the try, so a
        # signal raised at any point (harness/report/signals.py) finds it to remove; mkstemp
        # created it before returning, and a SIGTERM in between left it behind.
        tmp = path.parent / f"{temp_prefix(path.name)}{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC)
            os.fchmod(fd, FILE_MODE)  # regardless of the umask: readable in a shared folder
            mode = "wb" if binary else "w"
            with os.fdopen(fd, mode, encoding=None if binary else "utf-8") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            self.check(path)  # a link planted meanwhile is refused, not replaced silently
            os.replace(tmp, path)  # replaces the directory entry: never writes through a link
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)
        return path

    def put_text(self, target: str | os.PathLike, text: str) -> Path:
        return self.write_atomic(target, lambda f: f.write(text))

    def open_append(self, target: str | os.PathLike, exclusive: bool = False) -> IO[str]:
        """A text file opened for appending with O_NOFOLLOW (O_EXCL: it must not exist yet)."""
        path = self.check(target)
        self.mkdir(path.parent)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | (os.O_EXCL if exclusive else 0), FILE_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(
                    f"{path} is a symbolic link; results are never written through one"
                ) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePath(f"{path} is not a regular file")
        return os.fdopen(fd, "a", encoding="utf-8")

    def remove(self, target: str | os.PathLike) -> None:
        """Remove a regular file below the root (a link or a folder there is refused)."""
        path = self.check(target)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISREG(mode):
            raise UnsafePath(f"{path} is not a regular file; it is left alone")
        path.unlink(missing_ok=True)


DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


def disk_fault(exc: BaseException) -> bool:
    """A write that failed because the disk is full or read-only (not a bug in the run)."""
    return isinstance(exc, OSError) and exc.errno in DISK_ERRNOS


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the data is already safe
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class SafeFileHandler(logging.FileHandler):
    """Hydra's job log (harness.log) opened through SafeRoot: a planted link is never appended to.

    conf/config.yaml names it in `hydra.job_logging`; the root is the log file's folder."""

    def _open(self):  # noqa: ANN202 (logging's signature)
        path = Path(self.baseFilename)
        return SafeRoot(path.parent).open_append(path)
