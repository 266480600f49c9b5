"""`StoragePrefetch`: the capability of a storage tier whose pages are prefetched into the host
tier between a request's arrival and its admission (SGLang 0.5.23 HiCache's storage backend;
engines/cache/radix/hicache_storage.py implements it, engines/sched/sglang.py drives it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from engines.sequence import Sequence


@runtime_checkable
class StoragePrefetch(Protocol):
    def storage_round(self, waiting: Iterable[Sequence]) -> None:
        """A scheduler iteration begins: prefetches issued in earlier iterations complete (their
        pages enter the host tier), and each request in `waiting` seen for the first time since
        its last admission has its prefetch issued (upstream does it as the request is queued)."""
        ...

    def storage_ready(self, seq: Sequence) -> bool:
        """Whether admission may consider `seq` now (its prefetch policy's verdict)."""
        ...

    def storage_pending(self) -> bool:
        """Whether a prefetch is in flight (an iteration that schedules nothing is progress)."""
        ...

    def storage_split(self, seq: Sequence, prefix: int, host: int) -> tuple[int, int]:
        """`seq` is admitted with `prefix` cached tokens, the last `host` of them from the host
        tier: (host, storage) tokens, the storage part being what its prefetch brought in."""
        ...
