"""A read-only match: how many leading tokens of a request the tree holds, changing nothing.

The tree's own `match_prefix` splits the edge it stops inside and refreshes recency stamps along
the path; a router's probe (`PrefixPeek`) must do neither, so this walks the tree itself,
comparing edges without splitting or stamping, and finds the same page-aligned length.
"""

from __future__ import annotations

import numpy as np

from engines.cache.radix.hooks import request_key
from engines.cache.radix.key import TOKEN_BYTES, make_child_key, namespace_of
from engines.cache.radix.tree import UnifiedRadixTree
from engines.sequence import Sequence


def peek_prefix(tree: UnifiedRadixTree, seq: Sequence) -> int:
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
    """Whole pages the edge and the key share from `pos` (where the walk stops inside the edge)."""
    m = min(len(edge) // TOKEN_BYTES, n - pos)
    a = np.frombuffer(edge, dtype=np.int32, count=m)
    b = np.frombuffer(packed, dtype=np.int32, count=m, offset=pos * TOKEN_BYTES)
    differ = np.flatnonzero(a != b)
    i = int(differ[0]) if len(differ) else m
    return i // page * page
