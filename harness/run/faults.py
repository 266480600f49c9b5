"""A target's own processes failing under a run: a worker killed, a port taken before a server
bound it, a router that exited. Not a bug of the harness, so the run ends as a full disk does
(harness/results/safe_write.py `disk_fault`): one `error:` line naming what failed, exit 1, no
traceback, and a claimed run folder ends with a `failed` summary.
"""

from __future__ import annotations

from harness.results.safe_write import disk_fault


class TargetFault(RuntimeError):
    """A process the target started failed or exited while the run needed it; the message names
    the process and where its log is (harness/routers/faults.py `FleetFault`)."""


def outside_fault(exc: BaseException) -> bool:
    """A failure of the machine (a full or read-only disk) or of a target's process: one line."""
    return disk_fault(exc) or isinstance(exc, TargetFault)
