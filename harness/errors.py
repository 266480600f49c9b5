"""Bad input: which exceptions are the user's to fix, and a preflight over the command line.

Preflight composes the configuration before Hydra runs it, so an unknown config name or a value of
the wrong type is reported as one line (what, where, what is allowed) instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf.errors import OmegaConfBaseException

from engines.engine import CapacityError
from engines.registry import UnknownNameError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("workload", "engine", "model", "hardware", "suite")

# Exceptions that mean "the input is wrong": exit 2, one line, no traceback.
BAD_INPUT = (ValueError, FileNotFoundError, KeyError, CapacityError, UnknownNameError, OmegaConfBaseException)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    if isinstance(exc, KeyError):
        first = f"missing field {first}"
    return first


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def preflight(argv: list[str]) -> str | None:
    """Return one line describing the first problem with the command line, or None."""
    if any(a in ("-m", "--multirun", "--help", "-h", "--cfg", "-c", "--info", "--hydra-help") for a in argv):
        return None
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key in GROUPS and value not in options(key):
            return f"unknown {key} {value!r}; valid: {', '.join(options(key))}"
    return _compose_problem(argv)


def _compose_problem(argv: list[str]) -> str | None:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    overrides = [a for a in argv if not a.startswith("hydra.") and not a.startswith("hydra/")]
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"):
            cfg = compose(config_name="config", overrides=overrides)
            OmegaConf.to_object(cfg)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        detail = next((ln for ln in lines if "full_key" in ln), None)
        head = lines[0] if lines else type(exc).__name__
        return f"{head} ({detail})" if detail and detail not in head else head
    return None
