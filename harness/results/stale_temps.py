"""Temporary siblings a killed writer left behind, and how to tell them from a live writer's.

`SafeRoot.write_atomic` names its temporary file `.NAME.PID.XXXXXXXX.tmp` (PID: the writer's
process). A writer killed by SIGKILL runs no clean-up, so the next report removes, on start, the
ones whose writer is gone: no process has that PID, or the process holding it now started after
the file was last written (the PID was reused). A concurrent writer's files are never touched.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>[0-9]{1,10})\.[A-Za-z0-9_]{1,16}\.tmp")
SLACK_S = 2.0  # a file written this long before its PID's process started is older than it


def temp_prefix(name: str) -> str:
    """The name prefix of a temporary sibling of `name` written by this process."""
    return f".{name}.{os.getpid()}."


def remove_stale_temps(folder: Path) -> list[str]:
    """Delete the temporary files in `folder` (not below it) whose writer is gone; their names."""
    from harness.results.safe_write import SafeRoot, UnsafePath  # it names temps with ours

    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder yet, or unreadable: nothing of ours to clean
        return removed
    safe = SafeRoot(folder)  # never through a link: a planted one is left alone
    for entry in entries:
        match = TEMP_NAME.fullmatch(entry.name)
        if match is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or not writer_gone(int(match["pid"]), info.st_mtime):
            continue
        try:
            safe.remove(entry.path)  # gone already (another report cleaned it): no error
        except UnsafePath:
            continue
        removed.append(entry.name)
    return removed


def writer_gone(pid: int, mtime: float) -> bool:
    """No process `pid` is running, or the one running started after `mtime` (a reused PID)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError) as exc:  # another user's process: it is alive
        return isinstance(exc, OverflowError)
    started = process_start(pid)
    return started is not None and mtime < started - SLACK_S


def process_start(pid: int) -> float | None:
    """When process `pid` started (unix time) from /proc on Linux; None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time in ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None
