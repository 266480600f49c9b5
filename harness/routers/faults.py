"""A real-router fleet's processes failing under it: which one exited, how, and where its log is.

A worker killed mid-run, a router that cannot bind its port, a binary that cannot be executed:
each ends the run as one `error:` line naming the process, its PID and exit status (exit 1),
after every process the run started has been stopped by its PID (fleet.processes). A FleetFault
is a TargetFault (harness/run/faults.py): the pipeline prints it as that one line, no traceback.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from harness.run.faults import TargetFault


class FleetFault(TargetFault):
    """A fleet process failed or exited while the run needed it (not the user's input)."""


def exited(procs: Sequence[subprocess.Popen[bytes]], names: Sequence[str], logs: Path) -> list[str]:
    """One phrase per process of `procs` (named by `names`) that has exited."""
    out = []
    for k, (p, name) in enumerate(zip(procs, names)):
        code = p.poll()
        if code is not None:
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            log = logs / f"proc{k}.log"
            last = _last_line(log)
            said = f", its last line: {last!r}" if last else ""
            out.append(f"{name} (pid {p.pid}) exited, {how} (log {log}{said})")
    return out


def _last_line(log: Path, limit: int = 200) -> str:
    """The log's last non-blank line, cut to `limit` characters (the cause, usually)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def fault(what: str, gone: list[str]) -> FleetFault:
    """`what` went wrong; with the processes found dead, they are the cause to name."""
    return FleetFault(f"{what}: {'; '.join(gone)}" if gone else what)
