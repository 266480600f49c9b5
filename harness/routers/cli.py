"""The real-router side CLI's checks (harness/routers/fleet.py): what the user typed, all checked
before any process starts or any folder is made; and the lines printed after a real-router run,
the CLI's or the pipeline's (the split over workers, the twin's score, where the files are)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from harness.config.errors import BadInput
from harness.config.processes import ROUTER_BYTES, Spawn, check_spawns
from harness.fleet.config import MAX_REPLICAS


class FleetArgs(Protocol):
    router: str
    policy: str
    workers: int
    groups: int
    per_group: int


def check_fleet_args(
    args: FleetArgs, twinned: dict[str, tuple[str, ...]], worker: str, worker_bytes: int
) -> None:
    """Raise BadInput naming the flag the user typed: too few or too many workers (more processes
    or memory than this machine holds: harness/config/processes.py), a policy the router lacks or
    the twin cannot model, an empty stream."""
    if not 2 <= args.workers <= MAX_REPLICAS:
        raise BadInput(f"--workers must be an integer in [2, {MAX_REPLICAS}], got {args.workers}")
    valid = twinned.get(args.router, ())
    if args.policy not in valid:
        raise BadInput(
            f"--policy {args.policy!r} is not a {args.router}-router policy the twin models; "
            f"valid: {', '.join(valid)}"
        )
    for flag, value in (("--groups", args.groups), ("--per-group", args.per_group)):
        if value < 1:
            raise BadInput(f"{flag} must be at least 1 (the stream would be empty), got {value}")
    check_spawns(  # before any worker starts: N servers and a router must fit this machine
        f"--workers {args.workers}",
        [Spawn(worker, args.workers, worker_bytes), Spawn("router", 1, ROUTER_BYTES)],
    )


class Routed(Protocol):
    @property
    def predicted(self) -> int: ...

    @property
    def actual(self) -> int: ...

    @property
    def learned(self) -> bool: ...


def result_lines(
    title: str, decisions: Sequence[Routed], workers: int, out: Path, files: Sequence[str]
) -> list[str]:
    """The run in a few lines: the twin's score over the decisions it predicted from learned
    facts (its guesses while learning apart), requests per worker, and the files written."""
    scored = [d for d in decisions if d.learned]
    guesses = [d for d in decisions if not d.learned]
    equal = sum(d.predicted == d.actual for d in scored)
    split = Counter(d.actual for d in decisions)
    share = ", ".join(f"w{i} {split.get(i, 0)}" for i in range(workers))
    lines = [f"{title}: {equal}/{len(scored)} decisions predicted by the twin"]
    if guesses:
        right = sum(d.predicted == d.actual for d in guesses)
        lines.append(
            f"  guesses while learning the router's order (unscored): {right}/{len(guesses)}"
        )
    return [
        *lines,
        f"  requests per worker: {share}",
        f"  files: {', '.join(str(out / f) for f in files)}",
    ]
