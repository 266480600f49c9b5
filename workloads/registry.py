"""A tiny name -> object registry for workload families (no if/elif dispatch on names).

Kept separate from `engines/registry.py` because `workloads` never imports `engines`. An unknown
name raises `UnknownNameError` listing the valid ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from workloads.errors import BadInput

T = TypeVar("T")


class UnknownNameError(BadInput):
    """A configuration named something no registry entry provides."""


class Registry(Generic[T]):
    """Maps names to objects of one kind (workload families, orders, file formats, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REG.register("zipf")` stores the decorated object under `name`."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(sorted(self._entries))
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
