"""`RadixKey`: the token ids a tree operation walks, plus their namespace (docs/radix.md §1.1, §1.3).

A key wraps a token-id list without copying it. `limit` caps how many tokens it exposes (the match
cap of §6.1); `extra_key` (caller key + LoRA id) and `cache_salt` are namespaces that enter every
child key, so keys of different namespaces never share a node (§4).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence


def namespace_of(extra_key: str | None, cache_salt: str | None) -> Hashable | None:
    """The namespace part of a child key: None, `extra_key`, or `(extra_key, cache_salt)` (§1.3)."""
    if cache_salt is not None:
        return (extra_key, cache_salt)
    return extra_key


class RadixKey:
    """Token ids plus namespace. Slices keep the namespace; the limit is applied by the bounds."""

    __slots__ = ("token_ids", "extra_key", "cache_salt", "limit")

    def __init__(
        self,
        token_ids: Sequence[int],
        extra_key: str | None = None,
        cache_salt: str | None = None,
        limit: int | None = None,
    ) -> None:
        self.token_ids = token_ids if isinstance(token_ids, list) else list(token_ids)
        self.extra_key = extra_key
        self.cache_salt = cache_salt or None  # an empty salt is the global namespace
        self.limit = limit

    def __len__(self) -> int:
        n = len(self.token_ids)
        return n if self.limit is None else max(min(n, self.limit), 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self.token_ids[: len(self)])

    def __getitem__(self, index: int | slice) -> RadixKey:
        ids = self.token_ids[: len(self)]
        part = ids[index] if isinstance(index, slice) else [ids[index]]
        return RadixKey(part, self.extra_key, self.cache_salt)

    def __repr__(self) -> str:
        return f"RadixKey({self.ids()!r}, extra_key={self.extra_key!r}, cache_salt={self.cache_salt!r})"

    def ids(self) -> list[int]:
        """The exposed token ids (a copy only when a limit cuts them)."""
        n = len(self)
        return self.token_ids if n == len(self.token_ids) else self.token_ids[:n]

    @property
    def namespace(self) -> Hashable | None:
        return namespace_of(self.extra_key, self.cache_salt)

    def page_aligned(self, page_size: int) -> RadixKey:
        """The key cut to floor(len / P) * P tokens, limit applied."""
        n = len(self) // page_size * page_size
        return RadixKey(self.token_ids[:n], self.extra_key, self.cache_salt)

    def child_key(self, page_size: int) -> Hashable:
        """The dict key under which a node whose edge starts with these tokens hangs (§1.3)."""
        return make_child_key(self.token_ids, 0, page_size, self.namespace)


def make_child_key(
    ids: Sequence[int], pos: int, page_size: int, namespace: Hashable | None
) -> Hashable:
    """Child key of the edge starting at ids[pos]: first token, or first page tuple, under a namespace."""
    plain = ids[pos] if page_size == 1 else tuple(ids[pos : pos + page_size])
    return plain if namespace is None else (namespace, plain)
