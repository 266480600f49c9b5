"""Engine configuration: one dataclass for two independent choices, a cache and a scheduler.

`cache` (a design registered in engines/cache/__init__.py `DESIGNS`) picks the data structure,
`scheduler` (vllm | sglang) the admission design; None means the cache's own upstream scheduler
(its registration's `upstream_scheduler`). Knobs are flat keys named as upstream names them; each
belongs to the shared set or to one design (`DESIGN_KNOBS`: a cache design's come from its
registration), and `validate()` refuses a design knob set away from its default when its design
is not chosen.
`block_size` is the KV granularity of either cache: vLLM's block size, SGLang's page size.
Capacity is set in usable tokens, identically for both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from engines.cache import DEFAULT_DESIGN, DESIGNS, designs
from engines.cache.storage_tier import StorageTierConfig, validate_storage_tier
from engines.cache.tiers import HostTierConfig, validate_host_tier
from engines.errors import BadInput

# cache design -> the scheduler design its upstream ships it with
UPSTREAM_SCHEDULER = {d.name: d.upstream_scheduler for d in designs()}

# design (cache or scheduler) -> the knobs only that design reads (the rest are shared by every
# design); a cache design's come from its registration
DESIGN_KNOBS: dict[str, tuple[str, ...]] = {
    **{d.name: d.knobs for d in designs()},
    "vllm": ("stats_timing", "reserve_full_prompt", "async_scheduling"),
    "sglang": (
        "max_prefill_tokens",
        "clip_max_new_tokens",
        "schedule_conservativeness",
        "in_batch_check_threshold",
        "in_batch_deprioritize_threshold",
        "waiting_prefix_refresh",
        "sglang_frontend",
        "overlap",
        "overlap_blocking_forward",
    ),
}


@dataclass
class EngineConfig:
    cache: str = DEFAULT_DESIGN  # a registered cache design (engines/cache/__init__.py)
    scheduler: str | None = None  # vllm | sglang; None: the cache's upstream one
    prefix_caching: bool = True  # false: the design's disabled mode, everything else unchanged
    block_size: int = 16  # APC block size / radix page size
    kv_capacity_tokens: int = 65536  # usable KV tokens (block 0 is reserved on top)
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048  # per-step token budget = chunked-prefill size
    policy: str = "fcfs"  # fcfs | lpm | dfs-weight
    lpm_fallback_queue_len: int = 128  # lpm keeps the queue order above this many waiting
    # --- knobs of one cache design each (its registration's `knobs`) ---
    # vLLM 0.33 KVCacheManager (hash APC)
    hash_algo: str = "sha256"  # sha256 | sha256_cbor | xxhash | xxhash_cbor | builtin
    free_order: str = "v024"  # v024 | classic
    none_hash_seed: str | None = None
    verify_tokens_on_hit: bool = False  # keep each block's tokens and compare on a hit
    # Counterfactual, not upstream: head_first frees a table in its own order (shared head first,
    # so evicted first), the control arm for vLLM's tail-first freeing (claim 8).
    free_direction: str = "tail_first"  # tail_first | head_first
    # SGLang 0.5.23 RadixCache
    eviction_policy: str = "lru"  # lru | lfu | fifo | mru | filo | priority | slru | tlru
    # --- scheduler vllm (vLLM 0.33 Scheduler) ---
    stats_timing: str = "admission"  # admission | lookup
    reserve_full_prompt: bool | None = None  # None: follows free_order (v024 -> true)
    async_scheduling: bool | None = None  # None: follows free_order (v024 -> true)
    # --- scheduler sglang (SGLang 0.5.23 Scheduler) ---
    max_prefill_tokens: int = 16384
    clip_max_new_tokens: int = 4096
    schedule_conservativeness: float = 1.0
    in_batch_check_threshold: int = 32
    in_batch_deprioritize_threshold: int = 32
    waiting_prefix_refresh: bool = True
    # SGLang's overlap event loop (`event_loop_overlap`): batch N+1 is formed before batch N's
    # results are processed (engines/sched/sglang_overlap.py). On, as upstream ships it on a GPU;
    # false is `--disable-overlap-schedule`, the non-overlap loop (the plain pins and the suites'
    # arms name it). Read only by the SGLang scheduler.
    overlap: bool = True
    # Where the overlap loop's next receive falls. Off (a GPU): right after batch N is launched,
    # so a request arriving while N runs waits for the formation after the next. On (SGLang on
    # CPU, whose forward blocks its launch): after N's forward, so it joins batch N+1, still
    # formed before N's results are processed (docs/scheduler_x_cache.md, docs/servers.md §2.2).
    overlap_blocking_forward: bool = False
    # SGLang's front stage (engines/frontend.py): the awaited n > 1 prefix request and a program
    # batch's precached common prefix; false gives the SGLang scheduler vLLM's plain fan-out.
    sglang_frontend: bool = True
    # --- a host tier behind the device cache (engines/cache/tiers.py; tokens 0: off) ---
    host_tier: HostTierConfig = field(default_factory=HostTierConfig)
    # --- a storage tier behind the host tier (engines/cache/storage_tier.py; off by default) ---
    storage_tier: StorageTierConfig = field(default_factory=StorageTierConfig)
    # --- execution ---
    backend: str = "auto"  # auto | triton | torch
    # Real executor: decode-only steps as CUDA graphs, one per padded batch size. None: on with
    # CUDA (and a graph-safe backend, triton), off on CPU; true on CPU runs the same padded
    # static-buffer path eagerly.
    cuda_graphs: bool | None = None
    debug_checks: bool = False  # check_integrity() after every step
    # Simulated executor: advance stretches of pure decode as one macro-step (exact, see
    # engines/sched/base.py DecodeRun); false steps one by one (results are identical).
    decode_runs: bool = True
    # Keep a StepRecord per step (engines/step_log.py; the harness writes steps.jsonl): index,
    # kind, requests with their new tokens, preemptions. Off by default: it grows with the run.
    step_log: bool = False

    @property
    def scheduler_design(self) -> str:
        """The scheduler in effect: `scheduler`, or the cache's upstream one."""
        return self.scheduler or UPSTREAM_SCHEDULER.get(self.cache, "vllm")

    def design_knobs(self) -> dict[str, object]:
        """The chosen cache's and scheduler's own knobs with their values (policy_profile)."""
        names = DESIGN_KNOBS.get(self.cache, ()) + DESIGN_KNOBS.get(self.scheduler_design, ())
        chosen = {
            "cache": self.cache,
            "scheduler": self.scheduler_design,
            "schedule_policy": self.policy,
        }
        return {**chosen, **{name: getattr(self, name) for name in names}}

    def validate(self) -> None:
        """Raise BadInput naming the field for values no design accepts, and for a design knob
        set away from its default when its design is not the chosen cache or scheduler."""
        self._validate_designs()
        positive = ("block_size", "kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BadInput(f"engine.{name} must be a positive integer, got {value!r}")
        if self.free_direction not in ("tail_first", "head_first"):
            raise BadInput(
                "engine.free_direction must be one of ['head_first', 'tail_first'], "
                f"got {self.free_direction!r}"
            )
        for name in ("max_prefill_tokens", "clip_max_new_tokens"):
            _require_int(name, getattr(self, name), minimum=1)
        for name in (
            "lpm_fallback_queue_len",
            "in_batch_check_threshold",
            "in_batch_deprioritize_threshold",
        ):
            _require_int(name, getattr(self, name), minimum=0)
        value = self.schedule_conservativeness
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not 0 < value < math.inf
        ):
            raise BadInput(
                f"engine.schedule_conservativeness must be a positive number, got {value!r}"
            )
        for name in ("overlap", "overlap_blocking_forward"):
            if not isinstance(getattr(self, name), bool):
                raise BadInput(f"engine.{name} must be true or false, got {getattr(self, name)!r}")
        if self.cuda_graphs is not None and not isinstance(self.cuda_graphs, bool):
            raise BadInput(
                f"engine.cuda_graphs must be true, false or null, got {self.cuda_graphs!r}"
            )
        if self.kv_capacity_tokens % self.block_size:
            raise BadInput(
                f"engine.kv_capacity_tokens ({self.kv_capacity_tokens}) must be a multiple of "
                f"engine.block_size ({self.block_size})"
            )
        self._validate_host_tier()

    def _validate_host_tier(self) -> None:
        design = DESIGNS.get(self.cache)
        others = {d.name: d.tier_knobs for d in designs() if d.name != self.cache}
        unit = design.tier_unit(self.host_tier, self.block_size)
        validate_host_tier(self.host_tier, self.cache, unit, others)
        storage_others = {d.name: d.storage_knobs for d in designs() if d.name != self.cache}
        validate_storage_tier(self.storage_tier, self.cache, self.host_tier.enabled, storage_others)
        if self.storage_tier.enabled and not design.storage_tier:
            offered = sorted(d.name for d in designs() if d.storage_tier)
            raise BadInput(
                f"engine.storage_tier is not modelled for the {self.cache} cache "
                f"(caches with one: {offered})"
            )
        refused = design.storage_refuses(self.host_tier) if self.storage_tier.enabled else None
        if refused:
            raise BadInput(f"engine.storage_tier under {self.cache} {refused}")
        if not self.host_tier.enabled:
            return
        if not self.prefix_caching:
            raise BadInput("engine.host_tier.tokens must be 0 when engine.prefix_caching is false")
        upstream = UPSTREAM_SCHEDULER[self.cache]
        if self.scheduler_design != upstream:
            raise BadInput(
                f"engine.host_tier needs the {self.cache} cache's own scheduler ({upstream}), "
                f"got scheduler {self.scheduler_design}"
            )

    def _validate_designs(self) -> None:
        if self.cache not in UPSTREAM_SCHEDULER:
            raise BadInput(
                f"engine.cache must be one of {sorted(UPSTREAM_SCHEDULER)}, got {self.cache!r}"
            )
        schedulers = sorted(set(UPSTREAM_SCHEDULER.values()))
        if self.scheduler_design not in schedulers:
            raise BadInput(f"engine.scheduler must be one of {schedulers}, got {self.scheduler!r}")
        chosen = {self.cache, self.scheduler_design}
        defaults = {f.name: f.default for f in fields(EngineConfig)}
        for design, names in DESIGN_KNOBS.items():
            if design in chosen:
                continue
            for name in names:
                if getattr(self, name) != defaults[name]:
                    raise BadInput(
                        f"engine.{name} is a knob of the {design} design, which this run does not use "
                        f"(cache {self.cache}, scheduler {self.scheduler_design})"
                    )

    @property
    def num_blocks(self) -> int:
        """Pool blocks including the reserved block 0."""
        return self.kv_capacity_tokens // self.block_size + 1


def _require_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise BadInput(f"engine.{name} must be {what}, got {value!r}")
