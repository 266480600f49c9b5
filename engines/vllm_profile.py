"""vLLM version profiles: option defaults that changed between vLLM releases.

`FREE_ORDERS` (`engine.free_order`): the free queue's order rules and the scheduler defaults that
changed with them (docs/apc.md §0 table): `classic` and `v024`. `STATS_TIMINGS`
(`engine.stats_timing`): whether prefix-cache stats count at the lookup (<= v0.26) or once per
admission (>= v0.27). The hash cache reads the free-queue half, vLLM's scheduler the rest, so the
profile lives here, named by neither.
"""

from __future__ import annotations

from typing import NamedTuple

from engines.registry import Registry


class FreeOrder(NamedTuple):
    """One free-queue profile and the option defaults that follow it (§0 table)."""

    prepend_unhashed: bool  # caching on: hashless freed blocks go to the head
    prepend_when_disabled: bool  # caching off: where every freed block goes
    reserve_full_prompt: bool
    async_scheduling: bool


# registry: the free-order profiles
FREE_ORDERS: Registry[FreeOrder] = Registry("free_order")
FREE_ORDERS.add("classic", FreeOrder(False, False, False, False))
FREE_ORDERS.add("v024", FreeOrder(True, True, True, True))

# registry: stats_timing -> record inside the lookup (True, <= v0.26) or once at admission (False)
STATS_TIMINGS: Registry[bool] = Registry("stats_timing")
STATS_TIMINGS.add("lookup", True)
STATS_TIMINGS.add("admission", False)
