"""The storage tier (L3) behind a design's host tier: its config and its validation.

`engine.storage_tier.enabled` turns it on (off: the host-tiered cache is exactly what it was).
Both pinned upstreams stage storage through host memory, so a storage tier needs the host tier
(docs/tiers.md §10): vLLM 0.33's TieringOffloadingManager cascades every chunk stored to its CPU
primary tier into its secondary tiers (`vllm/v1/kv_offload/tiering/manager.py`, the file-system
tier in `tiering/fs/`) and promotes a secondary hit into the CPU tier before the GPU reads it;
SGLang 0.5.23's HiCache backs host pages up to its storage backend and prefetches a request's
storage hit into the host pool before admission (`mem_cache/unified_radix_cache.py`,
`managers/cache_controller.py`, `mem_cache/storage/file/`). Neither shipped file backend bounds
or evicts what it holds, so the tier here is unbounded too.

Each design reads only its own knobs; the others are refused away from their defaults, as the
host tier's are (the design registry's `storage_knobs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engines.cache.tiers import TierStats, refuse_others_knobs
from engines.errors import BadInput

# SGLang 0.5.23 `--hicache-storage-prefetch-policy` (server_args.py), its default first.
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")


@dataclass
class StorageTierConfig:
    """`engine.storage_tier`: an unbounded storage tier behind the host tier (off by default).

    radix (SGLang HiCache's storage): `prefetch_policy` best_effort | wait_complete | timeout
    (what of a prefetch in flight a request waits for at admission), `prefetch_threshold` (a
    storage hit shorter than this many tokens is not prefetched; upstream raises it to one page),
    `prefetch_timeout_base` and `prefetch_timeout_per_ki_token` (seconds; the timeout policy waits
    base + per_ki_token x tokens / 1024). Upstream's defaults: unified_radix_cache.py, 0.5.23.
    """

    enabled: bool = False
    prefetch_policy: str = "best_effort"
    prefetch_threshold: int = 256
    prefetch_timeout_base: float = 1.0
    prefetch_timeout_per_ki_token: float = 0.25


def validate_storage_tier(
    tier: StorageTierConfig,
    cache: str,
    host_tier_enabled: bool,
    others_knobs: dict[str, tuple[str, ...]],
) -> None:
    """Raise BadInput (one line: what, where, what is allowed) for a storage tier no design runs.

    others_knobs: each other design's storage knobs, refused away from their defaults."""
    if not isinstance(tier.enabled, bool):
        raise BadInput(f"engine.storage_tier.enabled must be true or false, got {tier.enabled!r}")
    refuse_others_knobs(
        "storage_tier", "storage tier", tier, StorageTierConfig(), others_knobs, cache
    )
    if tier.prefetch_policy not in PREFETCH_POLICIES:
        raise BadInput(
            f"engine.storage_tier.prefetch_policy must be one of {list(PREFETCH_POLICIES)}, "
            f"got {tier.prefetch_policy!r}"
        )
    value = tier.prefetch_threshold
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(
            f"engine.storage_tier.prefetch_threshold must be an integer >= 0, got {value!r}"
        )
    for name in ("prefetch_timeout_base", "prefetch_timeout_per_ki_token"):
        value = getattr(tier, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 <= value < math.inf
        ):
            raise BadInput(f"engine.storage_tier.{name} must be a number >= 0, got {value!r}")
    if tier.enabled and not host_tier_enabled:
        raise BadInput(
            "engine.storage_tier needs a host tier (engine.host_tier.tokens > 0): both upstreams "
            "stage storage through host memory"
        )


@runtime_checkable
class StorageTier(Protocol):
    """Capability: a storage tier behind the host tier (engines/cache/<design>/ implements it with
    its upstream's rules; the design's own scheduler drives it)."""

    def storage_stats(self) -> TierStats:
        """Its cumulative counters, in tokens: lookups and hits past the device and host hits,
        tokens written to storage, tokens read back from it (`evicted` stays 0: unbounded)."""
        ...
