"""The registry of claims, in the order of the published list; each module registers its own."""

from __future__ import annotations

from collections.abc import Callable

from engines.registry import Registry
from harness.claims.record import Claim, Finding

CLAIMS: Registry[Claim] = Registry("claim")


def claim(number: int, key: str, statement: str, source: str, threshold: str):
    """Decorator for a measuring function `(Context) -> Finding`."""

    def deco(measure: Callable[..., Finding]) -> Callable[..., Finding]:
        CLAIMS.add(key, Claim(number, key, statement, source, threshold, measure))
        return measure

    return deco


def ordered() -> list[Claim]:
    return sorted((CLAIMS.get(k) for k in CLAIMS.names()), key=lambda c: c.number)


# The claim modules register themselves on import; they import this module, so this comes last.
from harness.claims import (  # noqa: E402, F401
    alignment,
    backlog,
    bookkeeping,
    burst,
    decomposition,
    eviction,
    free_order,
    isolation,
    mixed,
    outputs,
    parallel_n,
    position,
    speedup,
    zero_hit,
)
