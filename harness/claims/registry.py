"""The registry of claims, in the order of the published list, filled here in one place.

Each claim module defines its `CLAIM` (statement, source, verdict rule and the measuring
function); the section below registers every one.
"""

from __future__ import annotations

from engines.registry import Registry
from harness.claims import (
    alignment,
    free_order,
    isolation,
    mixed,
    outputs,
    position,
    speedup,
    tree_reuse,
    zero_hit,
)
from harness.claims.record import Claim

# registry: every claim
CLAIMS: Registry[Claim] = Registry("claim")
for _module in (
    zero_hit,
    free_order,
    isolation,
    position,
    alignment,
    speedup,
    tree_reuse,
    outputs,
    mixed,
):
    CLAIMS.add(_module.CLAIM.key, _module.CLAIM)


def ordered() -> list[Claim]:
    return sorted((CLAIMS.get(k) for k in CLAIMS.names()), key=lambda c: c.number)
