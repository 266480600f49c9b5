"""Undo for a trial step: save the small state of an engine, run a step, put it all back.

A `Snapshot` keeps each given object's attributes and a shallow copy of every container it holds
(lists, dicts, sets, deques, arrays, and containers inside those), and `restore` puts the same
container objects back with their old contents. That is all a step changes outside the cache:
queues, counters, the sequences' progress, the timelines. A cache design's own state, whose pool
is O(capacity), is undone by the cache itself (`UndoableCache`, engines/cache/protocol.py), in
O(blocks the step touched). So a trial costs what is in flight, never what the pool holds.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from engines.cache.protocol import UndoableCache

if TYPE_CHECKING:  # engines.engine imports the caches, which import this module
    from engines.engine import Engine

Restore = Callable[[], None]


def _attrs(obj: object) -> dict[str, Any]:
    """Instance attributes, from `__dict__` and from `__slots__` (a slot never set is skipped)."""
    out = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                out[name] = getattr(obj, name)
    return out


def _save(value: object, saved: list[tuple[Any, Any]]) -> None:
    """Keep a shallow copy of `value` if it is a container, and of the containers inside it."""
    if isinstance(value, dict):
        saved.append((value, dict(value)))
        inner: Iterable[object] = value.values()
    elif isinstance(value, (list, deque, set)):
        saved.append((value, list(value)))
        inner = value
    elif isinstance(value, array):
        saved.append((value, array(value.typecode, value)))
        return
    else:
        return
    for item in inner:
        if isinstance(item, (dict, list, deque, set, array)):
            _save(item, saved)


def _put_back(container: Any, contents: Any) -> None:
    if isinstance(container, dict):
        container.clear()
        container.update(contents)
    elif isinstance(container, list | array):
        container[:] = contents
    elif isinstance(container, set):
        container.clear()
        container.update(contents)
    else:  # deque
        container.clear()
        container.extend(contents)


class Snapshot:
    """The attributes of `objects` and the contents of their containers, as they are now."""

    def __init__(self, objects: Iterable[object]) -> None:
        self._attrs: list[tuple[object, dict[str, Any]]] = []
        self._containers: list[tuple[Any, Any]] = []
        seen: set[int] = set()
        for obj in objects:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            attrs = _attrs(obj)
            self._attrs.append((obj, attrs))
            for value in attrs.values():
                _save(value, self._containers)

    def restore(self) -> None:
        for container, contents in self._containers:
            _put_back(container, contents)
        for obj, attrs in self._attrs:
            for name, value in attrs.items():
                object.__setattr__(obj, name, value)


def checkpoint(engine: Engine) -> Restore:
    """Save `engine` for one trial; the result undoes every change made since: submitted
    requests, steps, the cache's changes. The cache must be undoable. Attributes are put back,
    not removed: the engine's parts set all of theirs when built."""
    cache = engine.cache
    if not isinstance(cache, UndoableCache):
        raise TypeError(f"the {cache.name!r} cache cannot undo a step")
    loop = engine.loop
    objects = [engine, loop, loop.scheduler, engine.executor, engine.clock]
    objects += [*loop.waiting, *loop.running, *engine.in_flight_timelines()]
    state = Snapshot(objects)
    undo_cache = cache.checkpoint()

    def restore() -> None:
        undo_cache()
        state.restore()

    return restore
