"""Engine configuration: one dataclass that both cache designs read (Hydra YAML overrides it).

Fields mirror upstream knob names where one exists. `block_size` is the KV granularity of either
design: vLLM's block size for `apc`, SGLang's page size for `radix` (benchmarking.md §2,
`block_size_or_page_size`). Capacity is set in usable tokens, identically for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engines.errors import BadInput


@dataclass
class EngineConfig:
    cache: str = "apc"  # apc | radix
    prefix_caching: bool = True  # false: the design's disabled mode, everything else unchanged
    block_size: int = 16  # APC block size / radix page size
    kv_capacity_tokens: int = 65536  # usable KV tokens (block 0 is reserved on top)
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048  # per-step token budget = chunked-prefill size
    policy: str = "fcfs"  # fcfs | lpm | dfs-weight
    # --- apc (specs/apc.md §0) ---
    hash_algo: str = "sha256"  # sha256 | sha256_cbor | xxhash | xxhash_cbor | builtin
    free_order: str = "v024"  # v024 | classic
    none_hash_seed: str | None = None
    stats_timing: str = "admission"  # admission | lookup
    reserve_full_prompt: bool | None = None  # None: follows free_order (v024 -> true)
    async_scheduling: bool | None = None  # None: follows free_order (v024 -> true)
    verify_tokens_on_hit: bool = False  # keep each block's tokens and compare on a hit
    # --- radix (specs/radix.md §0) ---
    eviction_policy: str = "lru"  # lru | lfu | fifo | mru | filo | priority | slru | tlru
    max_prefill_tokens: int = 16384
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0
    lpm_fallback_queue_len: int = 128
    in_batch_check_threshold: int = 32
    in_batch_deprioritize_threshold: int = 32
    waiting_prefix_refresh: bool = True
    # --- execution ---
    backend: str = "auto"  # auto | triton | torch
    debug_checks: bool = False  # check_integrity() after every step

    def validate(self) -> None:
        """Raise BadInput naming the field for values no design accepts."""
        positive = ("block_size", "kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BadInput(f"engine.{name} must be a positive integer, got {value!r}")
        for name in ("max_prefill_tokens", "clip_max_new_tokens"):
            _require_int(name, getattr(self, name), minimum=1)
        for name in ("lpm_fallback_queue_len", "in_batch_check_threshold", "in_batch_deprioritize_threshold"):
            _require_int(name, getattr(self, name), minimum=0)
        value = self.schedule_conservativeness
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise BadInput(f"engine.schedule_conservativeness must be a positive number, got {value!r}")
        if self.kv_capacity_tokens % self.block_size:
            raise BadInput(
                f"engine.kv_capacity_tokens ({self.kv_capacity_tokens}) must be a multiple of "
                f"engine.block_size ({self.block_size})"
            )

    @property
    def num_blocks(self) -> int:
        """Pool blocks including the reserved block 0."""
        return self.kv_capacity_tokens // self.block_size + 1


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise BadInput(f"engine.{name} must be {what}, got {value!r}")
