"""Orders in which multi-turn sessions are sent (docs/benchmarking.md §3.3).

round_robin: A1 B1 C1 A2 B2 C2 ...  (largest reuse distance, SGLang --enable-multiturn)
sequential:  A1 A2 A3 B1 B2 B3 ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from workloads.registry import Registry

T = TypeVar("T")
ORDERS: Registry = Registry("session order")


@ORDERS.register("round_robin")
def _round_robin(sessions: Sequence[Sequence[T]]) -> list[T]:
    longest = max((len(s) for s in sessions), default=0)
    return [s[turn] for turn in range(longest) for s in sessions if turn < len(s)]


@ORDERS.register("sequential")
def _sequential(sessions: Sequence[Sequence[T]]) -> list[T]:
    return [item for s in sessions for item in s]


def interleave(sessions: Sequence[Sequence[T]], order: str) -> list[T]:
    return ORDERS.get(order)(sessions)
