"""Every target a run can measure, registered here in one place, and the lookup that picks one.

A target is chosen by its config key: the one whose key is set in the run's config (the
`server` group: a live server; `fleet.real`: a real router over real servers), else the
default (the built-in engine in this process). Each entry imports its module only when chosen,
so an in-process run never imports aiohttp. To add a target: a module with a `Target`
(harness/run/target.py), its config key in harness/config/schema.py, and one `TARGETS.add` line
below.
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
    group: str | None  # the RunConfig key that selects this target when set; None: the default
    load: Callable[[], Target[Any]]

    def selected(self, cfg: RunConfig) -> bool:
        """Whether `cfg` sets this entry's key (`fleet.real`: a field of a group)."""
        if self.group is None:
            return False
        value: object = cfg
        for part in self.group.split("."):
            value = getattr(value, part, None)
        return value is not None


def _engine() -> Target[Any]:
    from harness.run.engine_target import EngineTarget

    return EngineTarget()


def _live_server() -> Target[Any]:
    from harness.live_server.target import LiveServerTarget  # aiohttp: only when chosen

    return LiveServerTarget()


def _real_fleet() -> Target[Any]:
    from harness.routers.target import RealFleetTarget  # httpx, the router processes: when chosen

    return RealFleetTarget()


# registry: every target (name -> the config group that selects it, its loader)
TARGETS: Registry[TargetEntry] = Registry("target")
TARGETS.add(DEFAULT, TargetEntry(group=None, load=_engine))
TARGETS.add("live_server", TargetEntry(group="server", load=_live_server))
TARGETS.add("real_fleet", TargetEntry(group="fleet.real", load=_real_fleet))


def target_name(cfg: RunConfig) -> str:
    """The registered target `cfg` selects; two selected at once is bad input."""
    chosen = [name for name in TARGETS if TARGETS.get(name).selected(cfg)]
    if len(chosen) > 1:
        groups = " and ".join(str(TARGETS.get(name).group) for name in chosen)
        raise BadInput(f"{groups} are both set; a run measures one target")
    return chosen[0] if chosen else DEFAULT


def target_for(cfg: RunConfig) -> Target[Any]:
    return TARGETS.get(target_name(cfg)).load()
