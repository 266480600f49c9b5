"""Per-prefill-batch hit accounting, SGLang 0.5.23 style (`Scheduler.log_prefill_stats`).

`cached = sum prefix_len` of admitted requests (chunk continuations count 0), `new = sum extend_len`
(raw). The hit rate leaves out requests that were ever retracted; their sums go to `preempted_*`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from engines.cache.protocol import AnyPrefixCache

if TYPE_CHECKING:
    from engines.sched.prefill_adder import Admitted


class PrefillBatchStats(NamedTuple):
    """The log line's totals, and the first-attempt pair behind `sglang:cache_hit_rate`."""

    num_new_seqs: int
    new_tokens: int
    cached_tokens: int
    first_attempt_new_tokens: int
    first_attempt_cached_tokens: int

    @property
    def cache_hit_rate(self) -> float:
        total = self.first_attempt_new_tokens + self.first_attempt_cached_tokens
        return self.first_attempt_cached_tokens / total if total else 0.0


def record_prefill(
    cache: AnyPrefixCache, can_run_list: list[Admitted], retracted: dict[str, int]
) -> PrefillBatchStats:
    """Count one prefill batch of `Admitted` entries in the cache's stats; return its log-line
    figures."""
    num_new = new = cached = first_new = first_cached = 0
    for a in can_run_list:
        is_new = a.match is not None
        hit = a.prefix_len if is_new else 0
        num_new += is_new
        new += a.extend_len
        cached += hit
        retried = a.seq.seq_id in retracted
        cache.record_admission(hit, a.extend_len, new_request=is_new, retried=retried)
        if not retried:
            first_new += a.extend_len
            first_cached += hit
    return PrefillBatchStats(num_new, new, cached, first_new, first_cached)
