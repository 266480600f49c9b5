"""A tiny name -> object registry, used instead of if/elif dispatch on configuration strings.

An unknown name raises `UnknownNameError` listing the valid ones, so the CLI can print one clear
line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from engines.errors import BadInput

T = TypeVar("T")


class UnknownNameError(BadInput):
    """A configuration named something no registry entry provides."""


class Registry(Generic[T]):
    """Maps names to objects (classes, factories, functions) of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REG.register("lru")` stores the decorated object under `name`."""

        def deco(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        self.register(name)(obj)

    def remove(self, name: str) -> None:
        """Take `name` out again (a test's temporary entry); unknown names are an error."""
        self.get(name)
        del self._entries[name]

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
