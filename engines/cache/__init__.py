"""Prefix caches and their admission rules: `apc` (vLLM V1 hash APC) and `radix` (SGLang RadixCache).

`build_cache(config)` returns a (PrefixCache, Admission) pair from the registry in `base.py`;
each implementation registers itself when its module is imported (done below).
"""

import engines.cache.apc  # noqa: F401,E402
import engines.cache.radix  # noqa: F401,E402
from engines.cache.base import (  # noqa: F401
    CACHES,
    Admission,
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
