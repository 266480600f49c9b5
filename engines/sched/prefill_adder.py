"""`PrefillAdder`: the per-round admission budget of SGLang 0.5.23 (`schedule_policy.PrefillAdder`).

    rem_total   = free - sum_running min(max_new - generated, clip) * ratio
                  - sum_admitted (ceil_P(extend) + P + reserved_new)
    rem_current = free - sum_admitted (ceil_P(extend) + P)

`free` is `PrefixCache.free_tokens()` (upstream: available + evictable) and P the cache's block
(page) size. Both are live: locking an admitted prefix shrinks `free`, hence the budget.
`add_one_req` reports the budget state after admitting, so a request can be admitted and still
end the round.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from engines.cache.protocol import AnyPrefixCache
from engines.cache.records import PrefixMatch
from engines.sequence import Sequence


class AddReqResult(enum.Enum):
    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


class Admitted(NamedTuple):
    """One entry of `can_run_list`: compute `extend_len` tokens after `prefix_len`, of which the
    last `host_len` came from a host tier (loaded back, not computed)."""

    seq: Sequence
    prefix_len: int
    extend_len: int
    match: PrefixMatch[Any] | None  # None for a chunk continuation (it keeps its own state)
    lock: Any
    host_len: int = 0
    # the load already put the host_len tokens in the tree (`match` covers them)
    in_tree: bool = False


class PrefillAdder:
    def __init__(
        self,
        cache: AnyPrefixCache,
        running: list[Sequence],
        new_token_ratio: float,
        rem_input_tokens: int,
        rem_chunk_tokens: int | None,
        clip_max_new_tokens: int,
        ignore_eos: bool = False,
        in_flight: frozenset[str] = frozenset(),
    ) -> None:
        """`in_flight`: running requests whose last token upstream has not processed yet (the
        overlap loop), so its `output_ids` is one short for them."""
        self.cache, self.page_size = cache, cache.block_size
        self.clip = clip_max_new_tokens
        ratio = 1.0 if ignore_eos else new_token_ratio
        self.rem_total_token_offset: float = sum(
            min(seq.max_new_tokens - seq.num_output_tokens + (seq.seq_id in in_flight), self.clip)
            * ratio
            for seq in running
        )
        self.cur_rem_token_offset = 0
        self.rem_input_tokens = rem_input_tokens
        self.rem_chunk_tokens = rem_chunk_tokens
        self.can_run_list: list[Admitted] = []
        self.new_chunked_req: Sequence | None = None
        self.log_hit_tokens = 0
        self.log_input_tokens = 0

    def ceil_paged(self, n: int) -> int:
        return -(-n // self.page_size) * self.page_size

    @property
    def rem_total_tokens(self) -> float:
        return self.cache.free_tokens() - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> float:
        return self.cache.free_tokens() - self.cur_rem_token_offset

    def budget_state(self) -> AddReqResult:
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (
            self.rem_chunk_tokens is not None and self.rem_chunk_tokens <= 0
        ):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def _update_prefill_budget(self, prefix_len: int, extend_len: int, max_new_tokens: int) -> None:
        paged = self.ceil_paged(extend_len)
        self.rem_total_token_offset += paged + self.page_size + max_new_tokens
        self.cur_rem_token_offset += paged + self.page_size
        self.rem_input_tokens -= paged
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= paged
        self.log_hit_tokens += prefix_len
        self.log_input_tokens += extend_len  # raw, not page-ceiled (§10)

    def _take_loaded(self, host_len: int) -> None:
        """Loaded-back tokens hold device memory from now on (nothing without a host tier)."""
        self.rem_total_token_offset += host_len
        self.cur_rem_token_offset += host_len

    def loaded_into_tree(self, match: PrefixMatch[Any], lock: Any) -> None:
        """The last admission's load-back now holds device memory of its own (HiCache's
        `init_load_back` allocated it), so the budget stops counting it apart; its match and lock
        are the tree's after the load."""
        last = self.can_run_list[-1]
        self.rem_total_token_offset -= last.host_len
        self.cur_rem_token_offset -= last.host_len
        self.can_run_list[-1] = last._replace(match=match, lock=lock, in_tree=True)

    def add_chunked_req(self, seq: Sequence, prefix_len: int) -> Sequence | None:
        """The in-flight chunk goes first; returns the request if its prompt is still unfinished."""
        remaining = seq.num_tokens - prefix_len
        chunk = self.rem_chunk_tokens
        assert chunk is not None  # a chunk is in flight only under chunked prefill
        rem = min(chunk, int(self.rem_total_tokens))
        if rem <= 0:  # it must be added, or its slots would leak
            rem = chunk
        truncated = remaining > rem
        extend = min(remaining, rem)
        self.can_run_list.append(Admitted(seq, prefix_len, extend, None, None))
        reserved = 0 if truncated else min(seq.max_new_tokens, self.clip)
        self._update_prefill_budget(0, extend, reserved)
        return seq if truncated else None

    def add_one_req(
        self, seq: Sequence, match: PrefixMatch[Any], host_len: int = 0
    ) -> AddReqResult:
        """`host_len`: tokens past the device match a host tier loads back (HiCache's
        `init_load_back` before the budget check): they take device memory, not compute."""
        prefix_len = match.num_tokens + host_len
        extend = seq.num_tokens - prefix_len
        p = self.page_size
        total = (
            host_len
            + extend
            + min(max(seq.max_new_tokens - seq.num_output_tokens, 0), self.clip)
            + p
        )
        temp = self.cache.lock(match)  # the matched prefix leaves the evictable count
        try:
            if total >= self.rem_total_tokens:
                return AddReqResult.NO_TOKEN
            paged = self.ceil_paged(extend)
            if (
                self.rem_chunk_tokens is None
                and self.can_run_list
                and paged >= self.rem_input_tokens
            ):
                return AddReqResult.OTHER
            if self.rem_chunk_tokens is None or paged <= self.rem_chunk_tokens:
                lock = self.cache.lock(match)
                self.can_run_list.append(Admitted(seq, prefix_len, extend, match, lock, host_len))
                self._update_prefill_budget(prefix_len, extend, min(seq.max_new_tokens, self.clip))
                self._take_loaded(host_len)
            else:
                trunc = self.rem_chunk_tokens // p * p
                trunc -= (prefix_len + trunc) % p  # end the chunk on a page boundary
                if trunc <= 0:
                    return AddReqResult.OTHER
                lock = self.cache.lock(match)
                self.can_run_list.append(Admitted(seq, prefix_len, trunc, match, lock, host_len))
                self.new_chunked_req = seq
                self._update_prefill_budget(prefix_len, trunc, 0)
                self._take_loaded(host_len)
        finally:
            self.cache.unlock(temp)
        return self.budget_state()
