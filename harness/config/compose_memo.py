"""Hydra's composition of `config`, memoised on its config-group choices.

One composition costs ~0.25 s of CPU on the 2-core box: Hydra reads, parses and merges ~20 YAML
files and builds the defaults tree every time. The claims, the overhead tool and the tests compose
hundreds of configurations that differ only in values (`workload.num_users=8`, `seed=3`) over a
few group choices (`workload=multiturn`, `engine=radix`, `hardware=...`): a quick claim 8 spent 24
of its 35 s composing. So Hydra composes each distinct set of group choices once, and the value
overrides are applied to a copy the way Hydra applies them after composing (hydra-core 1.3.8,
`ConfigLoaderImpl._apply_overrides_to_config`: `OmegaConf.update(cfg, key, value, merge=True)` in
the order given, on the struct-mode config). An override not applied exactly that way (an
addition, a deletion, a sweep, a package, a key of Hydra's own node) and any error on that path
send the whole list to Hydra, so results and error messages are Hydra's own. A YAML file edited
while a process runs is not seen by that process's later compositions of the same group choices
(the claims and the overhead tool never edit conf/). tests/unit/test_compose_memo.py composes
configurations both ways and compares them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from hydra import compose as hydra_compose
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config.schema import CONF_DIR

CONFIG = "config"
MEMO_SIZE = 64  # distinct group choices kept (a claims run uses a few dozen)
_memo: dict[tuple[str, ...], DictConfig] = {}


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """What `hydra.compose("config", overrides)` returns, inside `initialize_config_dir(CONF_DIR)`."""
    split = _split(overrides)
    if split is None:
        return hydra_compose(config_name=CONFIG, overrides=list(overrides))
    groups, values = split
    cfg = copy.deepcopy(_composed(groups))
    try:
        for value in values:
            OmegaConf.update(cfg, value.key_or_group, value.value(), merge=True)
    except OmegaConfBaseException:
        return hydra_compose(config_name=CONFIG, overrides=list(overrides))  # Hydra's own error
    return cfg


def _composed(groups: tuple[str, ...]) -> DictConfig:
    """`config` with these group choices only, composed by Hydra once per process."""
    if groups not in _memo:
        if len(_memo) >= MEMO_SIZE:
            del _memo[next(iter(_memo))]
        _memo[groups] = hydra_compose(config_name=CONFIG, overrides=list(groups))
    return _memo[groups]


def _split(overrides: Sequence[str]) -> tuple[tuple[str, ...], list[Override]] | None:
    """(the group choices in order, the plain value overrides in order), or None when an
    override is neither (it goes to Hydra with the rest)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return None
    groups: list[str] = []
    values: list[Override] = []
    for o in parsed:
        if o.is_sweep_override():
            return None
        if o.package is not None or is_group(o.key_or_group):
            groups.append(o.input_line or "")
        elif _plain(o):
            values.append(o)
        else:
            return None
    return tuple(groups), values


def _plain(o: Override) -> bool:
    """`key=value` on the composed config: what Hydra applies with one OmegaConf.update."""
    top = o.key_or_group.split(".", 1)[0]
    return not (o.is_add() or o.is_delete() or o.is_force_add() or top == "hydra")


def is_group(name: str) -> bool:
    """A config group: a folder under conf/ or a group of the ConfigStore (the schemas)."""
    if (CONF_DIR / name).is_dir():
        return True
    node: object = ConfigStore.instance().repo
    for part in name.split("/"):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return isinstance(node, dict)
