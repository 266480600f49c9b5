"""`TieredRadixCache`: the radix cache with SGLang 0.5.23's HiCache host tier (`--enable-
hierarchical-cache`; `python/sglang/srt/mem_cache/` hiradix / unified radix cache with
`init_hicache`, `managers/cache_controller.py`; docs/tiers.md §3).

The device tree is `RadixCache` unchanged. Host copies are kept per page, keyed by the chain of
the page's whole prefix, so one walk finds the device prefix and then the host pages that follow
it. When a copy is written is the write policy's: on a finished request's insert once a page has
been inserted `threshold` times (write_through 1, write_through_selective 2), or when the device
evicts it (write_back); what a full host pool drops is upstream's (host_pages.py). A host hit of
at least `load_back_threshold` tokens is loaded back: the request holds those tokens as if
computed and its insert puts them in the tree, with the loaded host nodes' bounds as node bounds.
"""

from __future__ import annotations

from collections.abc import Sequence as Tokens

import numpy as np

from engines.cache.radix.cache import RadixAllocation, RadixCache
from engines.cache.radix.hooks import (
    alloc_extends,
    evict_to_free_tokens,
    extra_key_of,
    request_key,
)
from engines.cache.radix.host_pages import HostPages
from engines.cache.radix.key import unpack
from engines.cache.radix.node import TreeNode
from engines.cache.radix.tree import TreeLock
from engines.cache.records import PrefixMatch
from engines.cache.tiers import (
    LOAD_LAYERWISE,
    HostEvent,
    HostLoad,
    HostReset,
    HostTier,
    HostTierConfig,
    TierStats,
    TransferLog,
    Transfers,
    held_past_device,
    token_slots,
)
from engines.sequence import Sequence

# write policy -> inserts of a page before its host copy is written (None: on eviction only)
THRESHOLDS: dict[str, int | None] = {
    "write_through": 1,
    "write_through_selective": 2,
    "write_back": None,
}


def page_keys(tokens: Tokens[int], extra: object, page: int, num_pages: int) -> list[int]:
    """One key per whole page: a hash chained over every page before it (and the cache
    namespace), so equal keys mean equal prefixes."""
    keys: list[int] = []
    extend_keys(keys, hash(("hicache", extra)), tokens, page, num_pages)
    return keys


def extend_keys(keys: list[int], head: int, tokens: Tokens[int], page: int, num_pages: int) -> None:
    """Append the keys of pages len(keys) .. num_pages - 1 to `keys`, the chain of `tokens` whose
    first key hashes on `head` (page_keys's values, from where `keys` stopped)."""
    h = keys[-1] if keys else head
    if page == 1:  # SGLang's default page: one token a key, no slicing
        for t in tokens[len(keys) : num_pages]:
            h = hash((h, (t,)))
            keys.append(h)
        return
    for i in range(len(keys), num_pages):
        h = hash((h, tuple(tokens[i * page : (i + 1) * page])))
        keys.append(h)


class TieredRadixCache(RadixCache, HostTier):
    """RadixCache plus HiCache's host pages, write policy and load-back."""

    host_load_overlap = LOAD_LAYERWISE  # each layer waits for its own KV (docs/tiers.md §7)

    def __init__(self, *, tier: HostTierConfig, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.host_pages = tier.tokens // self.page_size
        self.threshold = THRESHOLDS[tier.write_policy]
        self.load_back_threshold = tier.load_back_threshold
        self.inserts: dict[int, int] = {}  # device pages' insert counts (upstream node.hit_count)
        # write_through writes every page on its first insert: the counts decide nothing then
        self.counts_inserts = self.threshold is not None and self.threshold > 1
        # each request's page keys so far (its tokens only grow): a lookup, its load and its
        # insert hash each page once, not once a call (at page 1 a key is a token)
        self.seq_keys: dict[str, tuple[Sequence, list[int]]] = {}
        self.tree.on_evict = self._on_device_evict
        self.queries = self.hits = self.stored = 0
        self.log = TransferLog()
        self.chain_ends: dict[int, tuple[TreeNode, int]] = {}  # `_chain_end`'s memo
        self.pages = HostPages(self.host_pages, self.threshold is None, self.log)
        # each request's loaded host nodes' bounds (tokens), kept as node bounds by its insert
        self.load_bounds: dict[str, list[int]] = {}

    # ---- keys -------------------------------------------------------------------------------
    def _seq_keys(self, seq: Sequence, num_tokens: int) -> list[int]:
        num_pages = num_tokens // self.page_size
        memo = self.seq_keys.get(seq.seq_id)
        if memo is None or memo[0] is not seq:  # a new request (or a reused id): from scratch
            memo = self.seq_keys[seq.seq_id] = (seq, [])
        keys = memo[1]
        if len(keys) < num_pages:
            head = hash(("hicache", (extra_key_of(seq), seq.salt)))
            extend_keys(keys, head, seq.token_ids, self.page_size, num_pages)
        return keys[:num_pages]

    def _leaf_keys(self, leaf: TreeNode) -> tuple[list[int], int | None]:
        """The page keys of `leaf`'s own pages and the key of the page before them (None at the
        root), chained on from its parent's end (`_chain_end`)."""
        parent = leaf.parent
        assert parent is not None  # the root is never evicted
        head = self._chain_end(parent, leaf.key_extra)
        tokens = unpack(leaf.tokens)
        keys: list[int] = []
        extend_keys(keys, head, tokens, self.page_size, len(tokens) // self.page_size)
        return keys, (None if parent.parent is None else head)

    def _chain_end(self, node: TreeNode, extra: object) -> int:
        """The chain key after `node`'s last page, memoized per node: a split keeps the lower
        half as the same node with the same end, so a memo stays right while the node lives
        (dropped when it is evicted)."""
        path: list[TreeNode] = []
        h = hash(("hicache", extra))
        cur: TreeNode | None = node
        while cur is not None and cur.parent is not None:
            memo = self.chain_ends.get(id(cur))
            if memo is not None and memo[0] is cur:
                h = memo[1]
                break
            path.append(cur)
            cur = cur.parent
        p = self.page_size
        for cur in reversed(path):
            tokens = unpack(cur.tokens)
            keys: list[int] = []
            extend_keys(keys, h, tokens, p, len(tokens) // p)
            h = keys[-1] if keys else h
            self.chain_ends[id(cur)] = (cur, h)
        return h

    # ---- writes -----------------------------------------------------------------------------
    def _write(
        self, keys: list[int], parent: int | None, seq: Sequence | None, slots: list[np.ndarray]
    ) -> None:
        """Host copies of `keys` (a chain run after `parent`; host_pages.py says what a full
        pool drops). `seq`: the request whose insert wrote them (None: a write-back of evicted
        pages); `slots`: each key's device token slots (empty unless copy events are kept)."""
        stored = self.pages.write(keys, parent, slots)
        if stored:
            self.stored += stored
            self.log.store(seq, stored * self.page_size)

    def release(self, seq: Sequence, *, finished: bool) -> None:
        st = self.reqs.get(seq.seq_id)
        if finished and st is not None and not self.tree.disable:
            keys = self._seq_keys(seq, st.kv_committed_len // self.page_size * self.page_size)
            self.pages.on_device(keys, 0)  # its insert puts every page there
            if self.threshold is not None:
                self._write_inserted(seq, keys, self.threshold)
        if finished:
            self.seq_keys.pop(seq.seq_id, None)
        self.pages.pins.clear()  # releases come between passes: no lookup awaits its load
        bounds = self.load_bounds.pop(seq.seq_id, None)
        super().release(seq, finished=finished)
        if finished and bounds and st is not None and not self.tree.disable:
            self._keep_load_bounds(seq, bounds)

    def _keep_load_bounds(self, seq: Sequence, bounds: list[int]) -> None:
        """Cut the request's inserted path at the bounds of the host nodes it loaded back.
        Upstream's load-back revives those nodes in the tree before the insert, so the insert
        only hangs the request's own tail below them, and a later device eviction takes the tail
        alone while the loaded head stays cached (`mem_cache/unified_radix_cache.py`
        `load_back`, `unified_cache/unified_tree_core.py` `commit_load_back`). Here a load
        leaves no node, so one leaf would span head and tail and be evicted and written back as
        a whole."""
        for bound in bounds:
            self.tree.cut(request_key(seq, num_tokens=bound), bound)

    def _write_inserted(self, seq: Sequence, keys: list[int], threshold: int) -> None:
        """The pages of a finished request's insert that reached `threshold` inserts, written."""
        p = self.page_size
        due, slots = [], []
        table = self.block_table(seq) if self.log.events is not None else None
        if table is None and not self.counts_inserts:  # write_through: every page is due
            due, keys = keys, []
        for i, key in enumerate(keys):  # a finished request's insert counts once per page
            count = 1
            if self.counts_inserts:
                count = self.inserts[key] = self.inserts.get(key, 0) + 1
            if count >= threshold:
                due.append(key)
                if table is not None:
                    slots.append(token_slots(table, p, i * p, (i + 1) * p))
        self._write(due, None, seq, slots)  # due: a run from the first page

    def _on_device_evict(self, leaf: TreeNode) -> None:
        keys, parent = self._leaf_keys(leaf)
        self.chain_ends.pop(id(leaf), None)
        if self.counts_inserts:
            for key in keys:
                self.inserts.pop(key, None)
        if self.threshold is None:  # write_back: written as the device lets it go
            p = self.page_size
            value = np.asarray(leaf.value, dtype=np.int64)
            slots = [value[j * p : (j + 1) * p] for j in range(len(keys))]
            self._write(keys, parent, None, slots if self.log.events is not None else [])
        self.pages.off_device(keys, 0)

    # ---- lookup and load-back ---------------------------------------------------------------
    def allocate_budgeted(self, items: list[RadixAllocation]) -> bool:
        """The pass's allocation; then only its own admissions' pins wait (for their loads)."""
        done = super().allocate_budgeted(items)
        admitted = {item.seq.seq_id for item in items}
        pins = self.pages.pins
        self.pages.pins = {rid: keys for rid, keys in pins.items() if rid in admitted}
        return done

    def allocate_decode(self, items: list[RadixAllocation]) -> bool:
        self.pages.pins.clear()  # a decode step admits nothing: no lookup awaits its load
        return super().allocate_decode(items)

    def host_lookup(self, seq: Sequence, device_tokens: int) -> int | None:
        if seq.skip_cache_read:
            return 0
        p = self.page_size
        limit = (seq.num_tokens - 1) // p * p  # the same cap as the device match
        keys = self._seq_keys(seq, limit)
        held, start, n = self.pages.held, device_tokens // p, 0
        for key in keys[start:]:
            if key not in held:
                break
            n += 1
        if n:
            self.pages.split_after(keys[start + n - 1])
        host = n * p
        if host < max(self.load_back_threshold, 1):
            self.pages.pins.pop(seq.seq_id, None)
            return 0
        self.pages.pins[seq.seq_id] = keys[start : start + n]
        return host

    def held_prefix_tokens(self, seq: Sequence) -> int:
        """The tree's cached prefix, then the host pages that continue it (HostPrefixPeek):
        read only (keys hashed afresh, not memoized; no recency moved)."""
        p = self.page_size
        extra = (extra_key_of(seq), seq.salt)
        keys = page_keys(seq.token_ids, extra, p, len(seq.token_ids) // p)
        return held_past_device(self.cached_prefix_tokens(seq), p, keys, self.pages.held)

    def host_load(self, seq: Sequence, device_tokens: int, host_tokens: int) -> None:
        self.pages.pins.pop(seq.seq_id, None)
        self.queries += seq.num_tokens - device_tokens
        self.hits += host_tokens
        if host_tokens:
            p = self.page_size
            chain = self._seq_keys(seq, device_tokens + host_tokens)
            keys = chain[device_tokens // p :]
            for key in reversed(keys):  # the head ends most recent
                self.pages.held.move_to_end(key)
            self.load_bounds[seq.seq_id] = self._node_bounds(keys, device_tokens)
            self.pages.on_device(chain, device_tokens // p)  # loaded back into the tree
            self.log.load(seq, host_tokens)
            if self.log.events is not None:
                end = device_tokens + host_tokens
                slots = token_slots(self.block_table(seq), p, device_tokens, end)
                self.log.events.append(HostLoad(seq, tuple(keys), 0, slots))

    def host_load_into_tree(
        self, seq: Sequence, match: PrefixMatch[TreeNode], lock: TreeLock, host_tokens: int
    ) -> tuple[PrefixMatch[TreeNode], TreeLock]:
        """Upstream's `load_back` at admission: slots for the loaded pages (evicting the
        shortfall while the match is locked), the pages revived in the tree one host run a node,
        and the request's lock moved to their end; so the next request of the same prefill round
        and the rounds formed before this request's result is processed (the overlap loop) match
        them on the device (`mem_cache/unified_radix_cache.py` `init_load_back`, `load_back`;
        `managers/schedule_policy.py` `add_one_req`)."""
        device, p = match.num_tokens, self.page_size
        n = device + host_tokens
        evict_to_free_tokens(self, host_tokens)
        path = self.tree.path_device_indices(match.handle)[:device]
        (slots,) = alloc_extends(
            self,
            [device],
            [host_tokens],
            lambda _: path[device - 1],
            "load-back out of memory: the adder's budget did not hold",
        )
        values = np.concatenate([np.asarray(path, np.int64), np.asarray(slots, np.int64)])
        key = request_key(seq, num_tokens=n)
        result = self.tree.insert(key, values, priority=seq.priority or 0, prev_prefix_len=device)
        keys = self._seq_keys(seq, n)[device // p :]
        for bound in self._node_bounds(keys, device)[:-1]:  # each host run one node upstream
            self.tree.cut(request_key(seq, num_tokens=bound), bound)
        node = result.last_device_node
        return PrefixMatch(n, node), self.tree.relock(lock, node)

    def _node_bounds(self, keys: list[int], start: int) -> list[int]:
        """Where the loaded pages `keys` (from token `start`) change host node (the runs one
        device eviction demoted), and their end: upstream's node bounds on that path."""
        run_of, p = self.pages.run_of, self.page_size
        return [
            start + i * p
            for i in range(1, len(keys) + 1)
            if i == len(keys) or run_of.get(keys[i]) != run_of.get(keys[i - 1])
        ]

    def host_after_schedule(self, scheduled: list[tuple[Sequence, int]]) -> None:
        """Nothing: HiCache writes from the tree's inserts and evictions."""

    def host_after_step(self, finished: list[Sequence]) -> None:
        """Nothing: writes and loads are complete when they are made."""

    def host_idle(self) -> None:
        """Nothing in flight."""

    def host_stats(self) -> TierStats:
        p = self.page_size
        return TierStats(
            queries=self.queries,
            hits=self.hits,
            stored=self.stored * p,
            loaded=self.hits,
            evicted=self.pages.evicted * p,
        )

    def host_take_transfers(self) -> Transfers:
        return self.log.take()

    def host_keep_events(self) -> tuple[int, int]:
        self.log.events = []
        return self.host_pages, self.page_size

    def host_take_events(self) -> list[HostEvent]:
        return self.log.take_events()

    def reset(self) -> bool:
        """A flush clears the host pool too (upstream's reset clears the host pool)."""
        if not super().reset():
            return False
        self.pages.clear()
        self.chain_ends.clear()
        self.inserts.clear()
        self.seq_keys.clear()
        self.load_bounds.clear()
        self.queries = self.hits = self.stored = 0
        if self.log.events is not None:
            self.log.events.append(HostReset())
        return True
