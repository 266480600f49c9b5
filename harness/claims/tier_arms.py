"""What the tier claims (25-27) share: each design's shipped arm with its host tier off or on, and
the per-run numbers they read (hits per tier, throughput, TTFT, the host link's totals).

A tier runs only under its design's own upstream scheduler (apc + vLLM's CPU offloading connector,
radix + SGLang's HiCache; docs/tiers.md §1), so the arms are the shipped pairings, tier off and on.
"""

from __future__ import annotations

from dataclasses import dataclass

from engines.cache import DESIGNS as DESIGN_REGISTRY
from harness.claims import keys
from harness.claims.arms import APC, RADIX, engine
from harness.claims.experiment import ArmResult

DESIGNS = (APC, RADIX)
TIER_NAME = {d: DESIGN_REGISTRY.get(d).tier_label for d in DESIGNS}  # the registry's one name
OFF, ON = "no tier", "tier"
HOST_TIER = "engine.host_tier.tokens"
HOST_HIT_RATE, DEVICE_HIT_RATE = "host_hit_rate", "device_hit_rate"
HOST_LINK = "host_link"


def tier_arm(design: str, host_tokens: int) -> tuple[str, ...]:
    """The design's shipped pairing with a host tier of `host_tokens` (0: off, today's cache)."""
    return (engine(design), f"{HOST_TIER}={host_tokens}")


def arm_label(design: str, state: str) -> str:
    return f"{design} {state}" if state == OFF else f"{design} + {TIER_NAME[design]}"


@dataclass(frozen=True)
class TierRun:
    """The numbers a tier claim reads from one run's summary."""

    hit_rate: float
    host_hit_rate: float
    throughput: float  # total tokens/s (input + output over the run's duration)
    output_throughput: float
    mean_ttft_ms: float
    stored_gb: float  # bytes the tier stored over the host link, both idle and measured
    load_stall_s: float  # step time the tier's loads added (what no compute hid)
    max_store_backlog_s: float  # the longest the stores queued behind the link

    @classmethod
    def of(cls, result: ArmResult) -> TierRun:
        s = result.summary
        link = s.get(HOST_LINK) or {}
        return cls(
            keys.value(s, keys.HIT_RATE),
            float(s.get(HOST_HIT_RATE) or 0.0),
            keys.value(s, keys.THROUGHPUT),
            keys.value(s, keys.OUTPUT_THROUGHPUT),
            keys.value(s, keys.TTFT_MEAN),
            float(link.get("store_bytes", 0)) / 1e9,
            float(link.get("load_stall_s", 0.0)),
            float(link.get("max_store_backlog_s", 0.0)),
        )
