"""The unified tree's recency clock (docs/radix.md §1.2): a logical counter, one read per stamp.

Each read returns the current value and then adds 1.0, so no two stamps are equal and only their
order carries meaning. Upstream uses one process-wide counter; trees take an injectable instance so
tests drive LRU order exactly. `PROCESS_CLOCK` is the shared default.
"""

from __future__ import annotations


class LogicalClock:
    """Monotone stamp source: `clock()` returns 0.0, 1.0, 2.0, ... from `start`."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        now = self._now
        self._now = now + 1.0
        return now

    def resume(self, now: float) -> None:
        """Continue from `now`: a caller that stamped from `peek()` on by adding 1.0 per read (the
        values `__call__` returns) hands the clock back where those reads would have left it."""
        self._now = now

    def peek(self) -> float:
        """The value the next read will return (reads nothing)."""
        return self._now


PROCESS_CLOCK = LogicalClock()
