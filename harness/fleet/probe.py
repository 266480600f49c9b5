"""Read-only probes of a replica's cache: how many leading prompt tokens it truly holds now.

`kv_aware` and `ideal` route on these. A probe must not change what it looks at: APC's lookup
never touches ref counts, the free queue or stats (its hash memo is dropped after); the radix
tree's own match splits edges and refreshes recency stamps, so the radix probe walks the tree
itself, comparing edges without splitting or stamping.
"""

from __future__ import annotations

from collections.abc import Sequence as Ids

import numpy as np

from engines.cache.apc.cache import ApcCache
from engines.cache.protocol import PrefixCache
from engines.cache.radix.cache import RadixCache
from engines.cache.radix.hooks import request_key
from engines.cache.radix.key import TOKEN_BYTES, make_child_key, namespace_of
from engines.cache.radix.tree import UnifiedRadixTree
from engines.sequence import Sequence


def cached_prefix_tokens(
    cache: PrefixCache, prompt_ids: Ids[int], salt: str | None = None, lora_id: str | None = None
) -> int:
    """Leading tokens of the prompt the cache holds (no last-token cap: what is stored)."""
    seq = Sequence(
        seq_id="\0fleet-probe",
        token_ids=prompt_ids,  # type: ignore[arg-type]  # read only
        num_prompt_tokens=len(prompt_ids),
        max_new_tokens=1,
        salt=salt,
        lora_id=lora_id,
    )
    if isinstance(cache, ApcCache):
        try:
            return len(cache.manager.lookup(seq, capped=False)) * cache.block_size
        finally:
            cache.manager._hashes.pop(seq.seq_id, None)  # the probe's hash memo
    if isinstance(cache, RadixCache):
        return _radix_walk(cache.tree, seq)
    raise TypeError(f"no read-only probe for {type(cache).__name__}")


def _radix_walk(tree: UnifiedRadixTree, seq: Sequence) -> int:
    """Matched page-aligned length of the request's key, as `match_prefix` finds it, read only."""
    if tree.disable:
        return 0
    key = request_key(seq)
    ids, packed, p = key.token_ids, key.packed(), tree.page_size
    namespace = namespace_of(key.extra_key, key.cache_salt)
    n = len(key) // p * p
    node, pos = tree.root_node, 0
    while pos < n:
        child = node.children.get(make_child_key(ids, packed, pos, p, namespace))
        if child is None:
            break
        edge = child.tokens
        if packed.startswith(edge, pos * TOKEN_BYTES) and pos + len(edge) // TOKEN_BYTES <= n:
            pos += len(edge) // TOKEN_BYTES
            node = child
            continue
        pos += _common_pages(edge, packed, pos, n, p)
        break
    return pos


def _common_pages(edge: bytes, packed: bytes, pos: int, n: int, page: int) -> int:
    m = min(len(edge) // TOKEN_BYTES, n - pos)
    a = np.frombuffer(edge, dtype=np.int32, count=m)
    b = np.frombuffer(packed, dtype=np.int32, count=m, offset=pos * TOKEN_BYTES)
    differ = np.flatnonzero(a != b)
    i = int(differ[0]) if len(differ) else m
    return i // page * page
