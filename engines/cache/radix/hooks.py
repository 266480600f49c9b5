"""Request-level wrappers around the tree (docs/radix.md §5.4, §6): match cap, allocation with
eviction of the shortfall, `checkpoint`, `checkpoint_kv_cache` and `release_kv_cache`.

A request's `req_to_token` row holds the slot of every position it has KV for:

    0            cache_protected_len        kv_committed_len
    | tree-owned (locked) | request-private (unaligned tail, not yet inserted) |

`ReqKV` is the per-request state upstream keeps on `Req` / `req.kv`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from engines.cache.radix.allocator import TokenToKVPoolAllocator
from engines.cache.radix.key import RadixKey, packed_tokens
from engines.cache.radix.node import TreeNode
from engines.cache.radix.tree import MatchResult, TreeLock, UnifiedRadixTree
from engines.cache.records import CacheIntegrityError
from engines.sequence import Sequence

if TYPE_CHECKING:
    from engines.cache.radix.cache import RadixCache


@dataclass
class ReqKV:
    row: int
    last_node: TreeNode
    lock: TreeLock | None = None
    prefix_len: int = 0
    cache_protected_len: int = 0
    cache_inserted_len: int = 0
    kv_committed_len: int = 0
    kv_allocated_len: int = 0
    extend_end: int = 0


def extra_key_of(seq: Sequence) -> str | None:
    """Caller key (`tags["extra_key"]`) with the LoRA id appended, as `Req.__init__` builds it (§4)."""
    extra = cast("str | None", seq.tags.get("extra_key"))
    if seq.lora_id:
        extra = (extra or "") + str(seq.lora_id)
    return extra


def request_key(seq: Sequence, limit: int | None = None, num_tokens: int | None = None) -> RadixKey:
    n = seq.num_tokens if num_tokens is None else min(num_tokens, seq.num_tokens)
    cap = n if limit is None else min(limit, n)  # the packed ids are kept per request: no copies
    packed = packed_tokens(seq, seq.token_ids)
    return RadixKey(seq.token_ids, extra_key_of(seq), seq.salt, cap, packed)


def max_prefix_len(seq: Sequence) -> int:
    """§6.1 cap: input_len - 1 (input = prompt + output so far); 0 when the prompt may not be read
    from the cache (the logprob_start_len = 0 case)."""
    return 0 if seq.skip_cache_read else max(seq.num_tokens - 1, 0)


def match_request(tree: UnifiedRadixTree, seq: Sequence, capped: bool = True) -> MatchResult:
    """`init_next_round_input`: match prompt + output, limited to the cap when `capped`."""
    return tree.match_prefix(request_key(seq, max_prefix_len(seq) if capped else None))


def evict_to_free_tokens(cache: RadixCache, need: int) -> None:
    """§5.4: when the allocator has fewer than `need` tokens, evict the shortfall only."""
    if cache.tree.disable:
        return
    available = cache.allocator.available_size()
    if available < need:
        cache.tree.evict_for_alloc(need - available)


def start_request(
    cache: RadixCache, seq: Sequence, prefix_len: int, last_node: TreeNode, lock: TreeLock | None
) -> ReqKV:
    """A newly admitted request: take a row and adopt the matched (and already locked) prefix."""
    row = cache.req_to_token_pool.alloc()
    if row is None:
        raise RuntimeError("req_to_token pool exhausted; raise max_num_seqs")
    st = ReqKV(row, last_node, lock, prefix_len, cache_protected_len=prefix_len)
    cache.reqs[seq.seq_id] = st
    return st


def prepare_extend(cache: RadixCache, batch: list[tuple[Sequence, ReqKV, int, int]]) -> None:
    """Rows and slots for a prefill batch of (seq, state, prefix_len, extend_len) (§7.1 step 3).

    A new request's row starts with the path's slots; every request gets `extend_len` new slots.
    """
    pool, tree, p = cache.req_to_token_pool, cache.tree, cache.page_size
    for _, st, prefix_len, _ in batch:
        row = pool.row(st.row)
        if not row and prefix_len:  # a new admission; a chunk continuation's row already has it
            row[:] = tree.path_device_indices(st.last_node)[:prefix_len]
    extend_lens = [e for _, _, _, e in batch]
    need = sum(extend_lens) + (len(batch) * p if p > 1 else 0)
    evict_to_free_tokens(cache, need)
    prefix_lens = [pre for _, _, pre, _ in batch]
    parts = alloc_extends(
        cache,
        prefix_lens,
        extend_lens,
        lambda i: pool.row(batch[i][1].row)[prefix_lens[i] - 1],
        "Prefill out of memory",
    )
    for (_, st, prefix_len, extend), part in zip(batch, parts):
        pool.row(st.row).extend(part)
        st.prefix_len = prefix_len
        st.extend_end = st.kv_committed_len = st.kv_allocated_len = prefix_len + extend


def alloc_extends(
    cache: RadixCache,
    prefix_lens: list[int],
    extend_lens: list[int],
    last_loc: Callable[[int], int],
    what: str,
) -> list[np.ndarray]:
    """New slots for each request's `extend_lens[i]` tokens after its `prefix_lens[i]`: one run
    split in order at page 1, page-aligned extensions otherwise (`last_loc(i)`, the slot of
    request i's last prefix token, is read only then). Out of memory raises `what`."""
    allocator = cache.allocator
    if isinstance(allocator, TokenToKVPoolAllocator):  # page 1
        slots = allocator.alloc(sum(extend_lens))
        if slots is None:
            raise CacheIntegrityError(what)
        parts, start = [], 0
        for e in extend_lens:
            parts.append(slots[start : start + e])
            start += e
        return parts
    last_locs = [last_loc(i) if pre else None for i, pre in enumerate(prefix_lens)]
    seq_lens = [pre + e for pre, e in zip(prefix_lens, extend_lens)]
    paged = allocator.alloc_extend(prefix_lens, seq_lens, last_locs)
    if paged is None:
        raise CacheIntegrityError(what)
    return paged


def prepare_decode(cache: RadixCache, states: list[ReqKV]) -> np.ndarray | list[int]:
    """One new slot per request (a fresh page when its current page is full) (§7.1 step 5);
    returns the slots, in the order of `states`."""
    p, pool, allocator = cache.page_size, cache.req_to_token_pool, cache.allocator
    evict_to_free_tokens(cache, len(states) * p)
    slots: np.ndarray | list[int] | None
    if isinstance(allocator, TokenToKVPoolAllocator):  # page 1
        slots = allocator.alloc(len(states))
    else:
        seq_lens = [st.kv_allocated_len + 1 for st in states]
        rows = [pool.row(st.row) for st in states]
        last_locs = [row[-1] if row else None for row in rows]
        slots = allocator.alloc_decode(seq_lens, last_locs)
    if slots is None:
        raise CacheIntegrityError("Decode out of memory")
    for st, slot in zip(states, slots):
        pool.row(st.row).append(slot)
        st.kv_allocated_len += 1
        st.kv_committed_len += 1
    return slots


def decode_run_pages(cache: RadixCache, states: list[ReqKV], num_steps: int) -> int:
    """Pages `num_steps` `prepare_decode` calls take: a request at a allocated tokens takes a
    fresh page at each of its positions a + s that is a multiple of P."""
    p = cache.page_size
    if p == 1:
        return num_steps * len(states)
    return sum(
        -(-(st.kv_allocated_len + num_steps) // p) - -(-st.kv_allocated_len // p) for st in states
    )


def prepare_decode_run(cache: RadixCache, states: list[ReqKV], num_steps: int) -> None:
    """`num_steps` calls of `prepare_decode` when none of them evicts (the caller sized the run):
    at page 1 the run's slots come off the free list in step-major order in one cut, so request j
    takes slots j, j + n, j + 2n, ... of it; at page P each step takes pages as prepare_decode does."""
    if cache.page_size > 1:
        for _ in range(num_steps):
            prepare_decode(cache, states)
        return
    n, pool = len(states), cache.req_to_token_pool
    slots = cache.allocator.alloc(num_steps * n)
    if slots is None:  # each step had n free slots, so none evicted, iff all num_steps * n were
        raise CacheIntegrityError("decode run out of KV slots: it was sized to fit")
    by_request = slots.reshape(num_steps, n).T
    for st, own in zip(states, by_request):
        pool.row(st.row).extend(own)
        st.kv_allocated_len += num_steps
        st.kv_committed_len += num_steps


def checkpoint(cache: RadixCache, st: ReqKV, seq: Sequence, up_to: int) -> None:
    """§6.2: insert tokens[:up_to] (page-aligned), split prompt from output, rewrite the row with
    the tree's slots, and move the request's single lock to the new last node."""
    tree = cache.tree
    if tree.disable:
        return
    p = cache.page_size
    n = up_to // p * p
    key = request_key(seq, num_tokens=n)
    row = cache.req_to_token_pool.row(st.row)
    values = row[:n]
    result = tree.insert(
        key,
        values,
        priority=seq.priority or 0,
        inserted_len=st.cache_inserted_len,
        prev_prefix_len=st.cache_protected_len,
        anchor=st.lock.node if st.lock is not None else None,
    )
    st.cache_inserted_len = max(st.cache_inserted_len, n)
    prompt_len = seq.num_prompt_tokens // p * p
    if 0 < prompt_len < n:  # a node boundary at the prompt end; the prompt part gets priority + 1
        tree.insert(
            key[:prompt_len],
            values[:prompt_len],
            priority=(seq.priority or 0) + 1,
            inserted_len=prompt_len,
            prev_prefix_len=prompt_len,
        )
    last = result.last_device_node
    protected = st.cache_protected_len
    row[protected:n] = tree.path_device_suffix(last, protected)
    st.lock = tree.lock(last) if st.lock is None else tree.relock(st.lock, last)
    st.cache_protected_len = n
    st.last_node = last


def checkpoint_kv_cache(cache: RadixCache, st: ReqKV, seq: Sequence) -> None:
    """After a prefill that did not finish the request (or for an in-flight chunk)."""
    checkpoint(cache, st, seq, st.extend_end)
    st.prefix_len = st.extend_end


def release_kv_cache(cache: RadixCache, st: ReqKV, seq: Sequence, do_checkpoint: bool) -> None:
    """§6.3: checkpoint what the request owns (normal finish only), free its private slots, unlock,
    free its row."""
    owned = st.kv_committed_len
    if do_checkpoint:
        checkpoint(cache, st, seq, owned)
    row = cache.req_to_token_pool.row(st.row)
    protected, p = st.cache_protected_len, cache.page_size
    if protected < owned:
        cache.allocator.free_segment(row[protected:owned], protected)
    if st.lock is not None:
        cache.tree.unlock(st.lock)
        st.lock = None
    over = max(-(-owned // p) * p, protected)
    if over < st.kv_allocated_len:
        cache.allocator.free_segment(row[over : st.kv_allocated_len], over)
    cache.req_to_token_pool.free(st.row)
