"""`RadixKey`: the token ids a tree operation walks, plus their namespace (docs/radix.md §1.1, §1.3).

A key wraps a token-id list without copying it. `limit` caps how many tokens it exposes (the match
cap of §6.1); `extra_key` (caller key + LoRA id) and `cache_salt` are namespaces that enter every
child key, so keys of different namespaces never share a node (§4). The tree compares keys as
packed int32 bytes (`packed`, built once per key), so an edge compares in one memcmp.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Hashable, Iterator, Sequence
from weakref import WeakKeyDictionary

import numpy as np

TOKEN_CODE = "i"  # array typecode of the packed form: C int, 4 bytes (int32)
TOKEN_DTYPE = np.int32  # the same, as numpy reads it
TOKEN_BYTES = 4


def pack(ids: Sequence[int] | np.ndarray) -> bytes:
    """Token ids as packed int32 bytes (the tree's compact key form)."""
    if isinstance(ids, np.ndarray):
        return ids.astype(TOKEN_DTYPE, copy=False).tobytes()
    if isinstance(ids, array):
        return ids.tobytes() if ids.typecode == TOKEN_CODE else array(TOKEN_CODE, ids).tobytes()
    # struct converts a list about 3x faster than array() does, to the same native int32 bytes.
    return struct.pack(f"{len(ids)}{TOKEN_CODE}", *ids)


def unpack(packed: bytes) -> list[int]:
    return array(TOKEN_CODE, packed).tolist()


class _Packed:
    """The packed form of one append-only token list, extended by the new tokens only."""

    __slots__ = ("data", "count")

    def __init__(self) -> None:
        self.data = b""
        self.count = 0

    def of(self, ids: Sequence[int]) -> bytes:
        n, count = len(ids), self.count
        if n < count or (count and ids[count - 1] != self._last()):  # not an extension: rebuild
            self.data, count = b"", 0
        if n > count:
            self.data += pack(ids[count:])
            self.count = n
        return self.data

    def _last(self) -> int:
        return int.from_bytes(self.data[-TOKEN_BYTES:], "little", signed=True)


_PACKED: WeakKeyDictionary[object, _Packed] = WeakKeyDictionary()


def packed_tokens(owner: object, ids: Sequence[int]) -> bytes:
    """`pack(ids)` for the append-only token list of `owner` (e.g. a Sequence), kept while the owner
    lives, so repeated keys of a growing request pack each token once, not once per call."""
    entry = _PACKED.get(owner)
    if entry is None:
        entry = _PACKED[owner] = _Packed()
    return entry.of(ids)


def namespace_of(extra_key: str | None, cache_salt: str | None) -> Hashable | None:
    """The namespace part of a child key: None, `extra_key`, or `(extra_key, cache_salt)` (§1.3)."""
    if cache_salt is not None:
        return (extra_key, cache_salt)
    return extra_key


class RadixKey:
    """Token ids plus namespace. Slices keep the namespace; the limit is applied by the bounds."""

    __slots__ = ("token_ids", "extra_key", "cache_salt", "limit", "_packed")

    def __init__(
        self,
        token_ids: Sequence[int],
        extra_key: str | None = None,
        cache_salt: str | None = None,
        limit: int | None = None,
        packed: bytes | None = None,
    ) -> None:
        self.token_ids = (
            token_ids if isinstance(token_ids, (list, array, np.ndarray)) else list(token_ids)
        )
        self.extra_key = extra_key
        self.cache_salt = cache_salt or None  # an empty salt is the global namespace
        self.limit = limit
        self._packed = packed  # starts with the exposed ids, packed; may run past them

    def __len__(self) -> int:
        n = len(self.token_ids)
        return n if self.limit is None else max(min(n, self.limit), 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self.token_ids[: len(self)])

    def __getitem__(self, index: int | slice) -> RadixKey:
        if isinstance(index, slice) and index.start in (None, 0) and index.step in (None, 1):
            stop = len(self) if index.stop is None else index.stop
            if stop >= 0:  # a head: same ids and packed form under a tighter limit, no copy
                limit = min(stop, len(self))
                extra, salt = self.extra_key, self.cache_salt
                return RadixKey(self.token_ids, extra, salt, limit, self._packed)
        ids = self.token_ids[: len(self)]
        part = ids[index] if isinstance(index, slice) else [ids[index]]
        return RadixKey(part, self.extra_key, self.cache_salt)

    def __repr__(self) -> str:
        return f"RadixKey({self.ids()!r}, extra_key={self.extra_key!r}, cache_salt={self.cache_salt!r})"

    def ids(self) -> list[int]:
        """The exposed token ids (a copy only when a limit cuts them)."""
        n = len(self)
        ids = self.token_ids if n == len(self.token_ids) else self.token_ids[:n]
        return ids.tolist() if isinstance(ids, (np.ndarray, array)) else ids

    def packed(self) -> bytes:
        """Int32 bytes that start with the exposed token ids (they may run past them: readers
        bound by len(key)); built on first use unless the caller supplied them."""
        n = len(self)
        if self._packed is None or len(self._packed) < n * TOKEN_BYTES:  # ids may have grown
            self._packed = pack(self.token_ids if n == len(self.token_ids) else self.token_ids[:n])
        return self._packed

    @property
    def extras(self) -> tuple[str | None, str | None]:
        """(extra_key, cache_salt): what a tree node keeps of its creating key."""
        return (self.extra_key, self.cache_salt)

    @property
    def namespace(self) -> Hashable | None:
        return namespace_of(self.extra_key, self.cache_salt)

    def page_aligned(self, page_size: int) -> RadixKey:
        """The key cut to floor(len / P) * P tokens, limit applied."""
        n = len(self) // page_size * page_size
        return RadixKey(self.token_ids[:n], self.extra_key, self.cache_salt)

    def child_key(self, page_size: int) -> Hashable:
        """The dict key under which a node whose edge starts with these tokens hangs (§1.3)."""
        return make_child_key(self.ids(), self.packed(), 0, page_size, self.namespace)


def make_child_key(
    ids: Sequence[int], packed: bytes, pos: int, page_size: int, namespace: Hashable | None
) -> Hashable:
    """Child key of the edge starting at ids[pos]: the first token (page 1) or the first page's
    packed bytes (page P; upstream uses a tuple, the same identity), under a namespace."""
    plain: Hashable
    if page_size == 1:
        plain = ids[pos]
    else:
        plain = packed[pos * TOKEN_BYTES : (pos + page_size) * TOKEN_BYTES]
    return plain if namespace is None else (namespace, plain)
