"""The lines a real-router run prints when it ends (harness/routers/target.py): the twin's score,
its guesses apart, the misses it can explain, the split over workers and where the files are."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from harness.routers.drive import Decision, order_only


def result_lines(
    title: str, decisions: Sequence[Decision], workers: int, out: Path, files: Sequence[str]
) -> list[str]:
    """The run in a few lines: the twin's score over the decisions it predicted from learned
    facts (its guesses while learning apart), the misses that are arrival order only and each
    replayed miss's cause (when there are any), requests per worker, and the files written."""
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
    if arrival := order_only(decisions):
        lines.append(f"  misses only in arrival order: {arrival}")
    if causes := Counter(d.cause for d in decisions if d.cause):
        lines.append(f"  misses by cause (replayed): {dict(sorted(causes.items()))}")
    return [
        *lines,
        f"  requests per worker: {share}",
        f"  files: {', '.join(str(out / f) for f in files)}",
    ]
