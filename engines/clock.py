"""Run clocks: the wall clock of the real executor and the virtual clock of the simulated one.

Both count seconds from the start of the measured run. `wait_until` sleeps on the wall clock and
jumps on the virtual one, so the engine loop is the same for both.
"""

from __future__ import annotations

import time
from typing import Protocol


class RunClock(Protocol):
    """Seconds since the start of the measured run."""

    def restart(self) -> None: ...

    def now(self) -> float: ...

    def wait_until(self, t_s: float) -> None:
        """Block (wall) or jump (virtual) until the clock reads at least `t_s`."""
        ...

    def advance(self, dt_s: float) -> None:
        """Account `dt_s` seconds of work (the wall clock advances by itself)."""
        ...


class WallClock:
    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    def restart(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t_s: float) -> None:
        delay = t_s - self.now()
        if delay > 0:
            time.sleep(delay)

    def advance(self, dt_s: float) -> None:
        """Real time advances by itself; executors call this with measured step times."""


class VirtualClock:
    def __init__(self) -> None:
        self._now = 0.0

    def restart(self) -> None:
        self._now = 0.0

    def now(self) -> float:
        return self._now

    def wait_until(self, t_s: float) -> None:
        self._now = max(self._now, t_s)

    def advance(self, dt_s: float) -> None:
        self._now += dt_s
