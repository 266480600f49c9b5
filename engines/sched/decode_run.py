"""Sizing a decode run (`engines.sched.base.DecodeRun`), shared by both scheduler designs.

A run may not reach a step in which a request finishes (that step releases KV and is planned as a
normal step), and every step of it must allocate without evicting through `PrefixCache.evict`.
"""

from __future__ import annotations

from engines.cache.protocol import DecodeRunAllocation
from engines.sequence import Sequence


def steps_before_finish(seqs: list[Sequence]) -> int:
    """Steps every sequence runs without finishing: a request with r tokens left samples its last
    one in its r-th step from now."""
    return min(seq.max_new_tokens - seq.num_output_tokens for seq in seqs) - 1


def fitting_steps(
    cache: DecodeRunAllocation, available: int, seqs: list[Sequence], max_steps: int, headroom: int
) -> int:
    """The most steps k <= max_steps of one token per sequence such that before every step the
    cache can allocate, without evicting through `evict`, both that step's tokens and `headroom`
    out of the `available` tokens (`DecodeRunAllocation.available_tokens()` before the run)
    (SGLang: one page per request, what its decode allocation evicts for, which covers its memory
    check's page-aligned need in every step; vLLM asks for nothing more).

    Allocatable tokens only shrink during a run, so with tok(k) the tokens k steps allocate the
    condition is tok(k) <= available and tok(k - 1) <= available - headroom, monotone in k.
    """
    if max_steps <= 0:
        return 0

    def fits(k: int) -> bool:
        return (
            cache.decode_run_tokens(seqs, k) <= available
            and cache.decode_run_tokens(seqs, k - 1) <= available - headroom
        )

    if fits(max_steps):
        return max_steps
    lo, hi = 0, max_steps  # fits(lo) (no steps), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
