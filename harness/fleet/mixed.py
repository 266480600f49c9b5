"""Mixed fleets: apc and radix replicas behind one router (`fleet.designs`, docs/fleet.md §1).

Replica i is of design `designs[i % len(designs)]`. A replica of the run's own cache design is the
run's engine config unchanged; one of another design gets that design's preset over it, as
`engine=apc` / `engine=radix` compose (conf/engine/<design>.yaml): its cache, its upstream
scheduler, its preset block size, and every knob of a design it does not use back at its default.
Shared knobs (capacity, batch budget, policy) stay the run's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from engines.cache import DESIGNS
from engines.config import DESIGN_KNOBS, EngineConfig
from engines.errors import BadInput
from harness.fleet.config import FleetConfig


def check_designs(cfg: FleetConfig) -> None:
    """`fleet.designs`: a non-empty list of registered designs, no longer than the fleet."""
    designs = cfg.designs
    valid = ", ".join(DESIGNS.names())
    if designs is None:
        return
    if len(designs) == 0:
        raise BadInput(
            f"fleet.designs must name at least one cache design (valid: {valid}), got []"
        )
    unknown = [d for d in designs if d not in DESIGNS]
    if unknown:
        raise BadInput(f"fleet.designs: unknown cache design {unknown[0]!r}; valid: {valid}")
    if cfg.replicas < 2:
        raise BadInput(f"fleet.designs needs a fleet (fleet.replicas >= 2), got {cfg.replicas}")
    if len(designs) > cfg.replicas:
        raise BadInput(
            f"fleet.designs lists {len(designs)} designs for {cfg.replicas} replicas "
            "(it is cycled over the replicas: at most one entry per replica)"
        )
    if cfg.real is not None:
        raise BadInput("fleet.designs is for the in-process fleet; fleet.real runs one design")


def replica_designs(cfg: FleetConfig) -> list[str] | None:
    """Each replica's design, or None when the fleet is not mixed (every replica the run's)."""
    if cfg.designs is None:
        return None
    return [cfg.designs[i % len(cfg.designs)] for i in range(cfg.replicas)]


def design_engine(base: EngineConfig, design: str) -> EngineConfig:
    """The run's engine config as a replica of `design` (the preset swap above)."""
    if design == base.cache:
        return base
    d = DESIGNS.get(design)
    default = EngineConfig()
    in_use = {d.name, d.upstream_scheduler}
    changes: dict[str, object] = {
        "cache": d.name,
        "scheduler": d.upstream_scheduler,
        "block_size": d.block_size,
    }
    for owner, names in DESIGN_KNOBS.items():
        if owner not in in_use:
            changes |= {name: getattr(default, name) for name in names}
    tier_defaults = default.host_tier
    other_tier = {n for o in DESIGNS.names() if o != d.name for n in DESIGNS.get(o).tier_knobs}
    tier = dataclasses.replace(
        base.host_tier,
        **{n: getattr(tier_defaults, n) for n in other_tier - set(d.tier_knobs)},
    )
    return dataclasses.replace(base, host_tier=tier, **changes)  # type: ignore[arg-type]


def replica_engines(base: EngineConfig, cfg: FleetConfig) -> list[EngineConfig] | None:
    """Each replica's engine config, each validated (a bad one names its design); None when the
    fleet is not mixed."""
    designs = replica_designs(cfg)
    if designs is None:
        return None
    by_design = {name: design_engine(base, name) for name in dict.fromkeys(designs)}
    for name, engine in by_design.items():
        try:
            engine.validate()
        except BadInput as exc:
            raise BadInput(f"fleet.designs: the {name} replicas' engine: {exc}") from None
    return [by_design[name] for name in designs]


@dataclasses.dataclass
class _DesignSum:
    replicas: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


def per_design(per_replica: Sequence[dict[str, object]]) -> list[dict[str, object]]:
    """The per-replica facts summed per design (each row must carry `design`), in first-seen
    order: replicas, requests, prompt and cached tokens, hit rate."""
    sums: dict[str, _DesignSum] = {}
    for row in per_replica:
        acc = sums.setdefault(str(row["design"]), _DesignSum())
        acc.replicas += 1
        acc.requests += _count(row["requests"])
        acc.prompt_tokens += _count(row["prompt_tokens"])
        acc.cached_tokens += _count(row["cached_tokens"])
    return [
        {
            "design": name,
            **dataclasses.asdict(acc),
            "hit_rate": acc.cached_tokens / acc.prompt_tokens if acc.prompt_tokens else None,
        }
        for name, acc in sums.items()
    ]


def _count(value: object) -> int:
    assert isinstance(value, int), value  # fleet_facts writes counts as ints
    return value
