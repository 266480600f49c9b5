"""Bad input: one exception concept, and the one line the user sees for it.

`BadInput` is raised for input the user must fix: a config value, a data file, a workload or KV
pool this machine cannot hold, an unusable output directory. `engines` and `workloads` cannot
import each other or the harness, so each has its own `errors.BadInput` (same concept, same
contract); `BAD_INPUT` names both, and the harness's own class subclasses both. Hydra and OmegaConf
errors count as bad input only while the configuration is composed (`CONFIG_ERRORS`). Every other
exception is a crash: the run keeps its rows, is marked failed, and its traceback is printed.
"""

from __future__ import annotations

import dataclasses

from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

import engines.errors
import workloads.errors

BAD_INPUT: tuple[type[Exception], ...] = (engines.errors.BadInput, workloads.errors.BadInput)


class BadInput(engines.errors.BadInput, workloads.errors.BadInput):  # the BAD_INPUT pair
    """Input the user must fix, found by the harness (run-level fields, output directories)."""


def config_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad input while composing a configuration (not while running)."""
    from hydra.errors import HydraException

    return (*BAD_INPUT, HydraException, OmegaConfBaseException)


def describe(exc: BaseException) -> str:
    """One line for the user: the OmegaConf problem under a Hydra error (with its key), else the
    first line of the message."""
    root = _omegaconf_cause(exc)
    if root is not None:
        return _describe_omegaconf(root)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


def _omegaconf_cause(exc: BaseException) -> OmegaConfBaseException | None:
    """Hydra wraps OmegaConf's errors ("Error merging override x=y"); the cause names the key.
    Other exceptions keep their own message, even when raised while handling an OmegaConf one."""
    from hydra.errors import HydraException

    node: BaseException | None = exc
    for _ in range(8):  # a short chain; bounded in case of a cycle
        if isinstance(node, OmegaConfBaseException) and getattr(node, "full_key", None):
            return node
        if not isinstance(node, (HydraException, OmegaConfBaseException)):
            return None
        node = node.__cause__ or node.__context__
    return None


def _describe_omegaconf(exc: OmegaConfBaseException) -> str:
    key = exc.full_key
    owner = getattr(exc, "object_type", None)
    if isinstance(exc, ConfigAttributeError | ConfigKeyError) and dataclasses.is_dataclass(owner):
        valid = ", ".join(sorted(f.name for f in dataclasses.fields(owner)))
        return f"unknown field {key}; valid: {valid}"
    message = str(getattr(exc, "msg", exc)).strip().splitlines()[0]
    return f"{key}: {message}"
