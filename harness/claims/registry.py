"""The registry of claims, in the order of the published list, filled here in one place.

Each claim module defines its `CLAIM` (statement, source, verdict rule and the measuring
function); the section below registers every one.
"""

from __future__ import annotations

from engines.registry import Registry
from harness.claims import (
    adapters,
    alignment,
    backlog,
    bookkeeping,
    burst,
    duplicates,
    eviction,
    free_order,
    hash_algos,
    isolation,
    mixed,
    multimodal,
    outputs,
    overlap,
    parallel_n,
    position,
    prefix_weight,
    rag_template,
    speedup,
    tier_cost,
    tier_multiturn,
    tier_throughput,
    tier_ttft,
    transfer,
    tree_reuse,
    tree_sampling,
    ttft_benefit,
    zero_hit,
)
from harness.claims.record import Claim

# registry: every claim
CLAIMS: Registry[Claim] = Registry("claim")
for _module in (
    zero_hit,
    alignment,
    speedup,
    mixed,
    position,
    tree_reuse,
    outputs,
    free_order,
    isolation,
    burst,
    bookkeeping,
    parallel_n,
    eviction,
    backlog,
    rag_template,
    transfer,
    prefix_weight,
    ttft_benefit,
    adapters,
    duplicates,
    hash_algos,
    tree_sampling,
    multimodal,
    overlap,
    tier_ttft,
    tier_multiturn,
    tier_cost,
    tier_throughput,
):
    CLAIMS.add(_module.CLAIM.key, _module.CLAIM)


def ordered() -> list[Claim]:
    return sorted((CLAIMS.get(k) for k in CLAIMS.names()), key=lambda c: c.number)


# Where each claim comes from, by number (docs/claims.md §1): the published list first, then this
# project's own finding, then the claims of the article that its table did not test, then those an
# upstream pull request published (24: SGLang PR #26378), then the published figures of the KV
# tiers (25-28: vLLM's offloading blog, SGLang's HiCache blog, llm-d's tiered guide; issue 50).
PUBLISHED = range(1, 10)
FINDINGS = range(10, 11)
UPSTREAM = range(24, 25)
TIERS = range(25, 29)


def census() -> str:
    """How many claims run, by origin, as the README and docs/claims.md say it."""
    numbers = [c.number for c in ordered()]
    published = sum(n in PUBLISHED for n in numbers)
    findings = sum(n in FINDINGS for n in numbers)
    upstream = sum(n in UPSTREAM for n in numbers)
    tiers = sum(n in TIERS for n in numbers)
    article = len(numbers) - published - findings - upstream - tiers
    return (
        f"{len(numbers)} claims: {published} published, {findings} finding of this project, "
        f"{article} of the article's untested claims, {upstream} from an upstream pull request "
        f"and {tiers} on KV tiers"
    )
