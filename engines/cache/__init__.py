"""Prefix caches: `apc` (vLLM V1 hash APC) and `radix` (SGLang RadixCache), behind one protocol.

`build_cache(config)` returns the (PrefixCache, Admission) pair of `config.cache` driven by the
scheduler design `config.scheduler` (engines/sched/); each registers itself on import (below).
"""

import engines.cache.apc  # noqa: F401,E402
import engines.cache.radix  # noqa: F401,E402
import engines.sched  # noqa: F401,E402  (registers the scheduler designs)
from engines.cache.base import (  # noqa: F401
    CACHES,
    SCHEDULERS,
    Admission,
    Allocation,
    CacheIntegrityError,
    CacheStats,
    CacheUsage,
    PrefixCache,
    PrefixMatch,
    ScheduledSeq,
    StepBudget,
    StepPlan,
    build_cache,
)
