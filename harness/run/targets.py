"""Every target a run can measure, registered here in one place, and the lookup that picks one.

A target is chosen by its config group: the one whose group is set in the run's config (the
`server` group: a live server), else the default (the built-in engine in this process). Each
entry imports its module only when chosen, so an in-process run never imports aiohttp.
To add a target: a module with a `Target` (harness/run/target.py), its config group in
harness/config/schema.py, and one `TARGETS.add` line below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engines.registry import Registry
from harness.config.errors import BadInput
from harness.config.schema import RunConfig
from harness.run.target import Target

DEFAULT = "engine"


@dataclass(frozen=True)
class TargetEntry:
    group: str | None  # the RunConfig field that selects this target when set; None: the default
    load: Callable[[], Target[Any]]


def _engine() -> Target[Any]:
    from harness.run.engine_target import EngineTarget

    return EngineTarget()


def _live_server() -> Target[Any]:
    from harness.live_server.target import LiveServerTarget  # aiohttp: only when chosen

    return LiveServerTarget()


# registry: every target (name -> the config group that selects it, its loader)
TARGETS: Registry[TargetEntry] = Registry("target")
TARGETS.add(DEFAULT, TargetEntry(group=None, load=_engine))
TARGETS.add("live_server", TargetEntry(group="server", load=_live_server))


def target_name(cfg: RunConfig) -> str:
    """The registered target `cfg` selects; two selected at once is bad input."""
    chosen = [
        name
        for name in TARGETS
        if (group := TARGETS.get(name).group) is not None and getattr(cfg, group, None) is not None
    ]
    if len(chosen) > 1:
        groups = " and ".join(str(TARGETS.get(name).group) for name in chosen)
        raise BadInput(f"{groups} are both set; a run measures one target")
    return chosen[0] if chosen else DEFAULT


def target_for(cfg: RunConfig) -> Target[Any]:
    return TARGETS.get(target_name(cfg)).load()
