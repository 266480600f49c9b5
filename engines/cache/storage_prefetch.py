"""`StoragePrefetch`: the capability of a storage tier whose pages are prefetched into the host
tier between a request's arrival and its admission (SGLang 0.5.23 HiCache's storage backend;
engines/cache/radix/hicache_storage.py implements it, engines/sched/sglang.py drives it).

`TimedStorageReads` is the seam through which a priced storage link (engines/storage_link.py, on
the simulated executor) tells such a tier when each prefetch's read runs, so that the prefetch
progresses on the read's clock (docs/tiers.md §10.3): the executor pushes `ReadTiming`s in, the
cache never looks into the executor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engines.sequence import Sequence


@dataclass(frozen=True)
class ReadTiming:
    """When the storage link reads one request's prefetch: from `start_s` to `end_s` on the run
    clock, `tokens` tokens at a constant rate, in order (so the pages land as a growing prefix)."""

    start_s: float
    end_s: float
    tokens: int

    def tokens_done(self, now_s: float) -> int:
        """Tokens read by `now_s` (all of them from `end_s` on, exactly)."""
        if now_s >= self.end_s:
            return self.tokens
        if now_s <= self.start_s:
            return 0
        return min(self.tokens - 1, int(self.tokens * (now_s - self.start_s) / self.duration_s))

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@runtime_checkable
class StoragePrefetch(Protocol):
    def storage_round(self, waiting: Iterable[Sequence], now_s: float | None = None) -> None:
        """A scheduler iteration begins at `now_s` on the run clock (None: not known): prefetches
        issued in earlier iterations complete (their pages enter the host tier) unless their
        reads are timed, and each request in `waiting` seen for the first time since its last
        admission has its prefetch issued (upstream does it as the request is queued)."""
        ...

    def storage_ready(self, seq: Sequence) -> bool:
        """Whether admission may consider `seq` now (its prefetch policy's verdict)."""
        ...

    def storage_pending(self) -> bool:
        """Whether a prefetch is in flight that a waiting request may still gain from (an
        iteration that schedules nothing is then progress)."""
        ...

    def storage_due_s(self) -> float | None:
        """The earliest time after the current iteration's at which a timed read lets a waiting
        request in (its read's end, or its timeout deadline); None when nothing waits on a clock
        (the next iteration decides, as without timed reads)."""
        ...

    def storage_split(self, seq: Sequence, prefix: int, host: int) -> tuple[int, int]:
        """`seq` is admitted with `prefix` cached tokens, the last `host` of them from the host
        tier: (host, storage) tokens, the storage part being what its prefetch brought in."""
        ...


@runtime_checkable
class TimedStorageReads(Protocol):
    """A storage tier whose prefetches can follow a priced storage link's clock."""

    def storage_reads_clocked(self) -> None:
        """From now on every prefetch read is timed (`storage_read_timed`): a prefetch
        completes as its read does, not at the next iteration."""
        ...

    def storage_read_timed(self, seq_id: str, timing: ReadTiming) -> None:
        """`seq_id`'s prefetch read runs as `timing` says (sent again when an earlier read was
        cut short and this one moved up)."""
        ...
