"""Bad input: which exceptions are the user's to fix, run-level checks, and a command-line preflight.

Preflight composes the configuration before Hydra runs it and applies every check that needs no
data, so an unknown config name, a value of the wrong type or out of range is one line (what,
where, what is allowed) and no run directory. Checks that need data (trace lines, dataset fields,
a request longer than the context or the KV capacity) fail inside the run, also as one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from engines.engine import CapacityError
from engines.registry import UnknownNameError

CONF_DIR = Path(__file__).resolve().parent / "conf"
GROUPS = ("workload", "engine", "model", "hardware", "suite")
DECODES = ("greedy", "scripted")
SWEEP_FLAGS = ("-m", "--multirun")
SKIP_FLAGS = ("--help", "-h", "--cfg", "-c", "--info", "--hydra-help", "--shell-completion")

# Exceptions that mean "the input is wrong": exit 2, one line, no traceback.
BAD_INPUT = (
    ValueError,
    FileNotFoundError,
    CapacityError,
    UnknownNameError,
    OmegaConfBaseException,
)


def describe(exc: BaseException) -> str:
    """One line for the user: the OmegaConf problem under a Hydra error (with its key), else the
    first line of the message."""
    root = _omegaconf_cause(exc)
    if root is not None:
        return _describe_omegaconf(root)
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    if isinstance(exc, KeyError):
        first = f"missing field {first}"
    return first


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


def options(group: str, search_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Config names of `group`: the packaged ones plus those in `hydra.searchpath` folders."""
    return sorted({p.stem for d in (CONF_DIR, *search_dirs) for p in (d / group).glob("*.yaml")})


def search_dirs(argv: list[str]) -> tuple[Path, ...]:
    """The `file://` folders of a `hydra.searchpath=[...]` override (users' own configs)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    found: list[Path] = []
    for arg in argv:
        if arg.startswith("hydra.searchpath="):
            try:
                values = OverridesParser.create().parse_overrides([arg])[0].value()
            except HydraException:  # composing reports the syntax error as one line
                continue
            found += [Path(v[len("file://") :]) for v in values if str(v).startswith("file://")]
    return tuple(found)


def check_run_config(cfg) -> None:
    """Raise ValueError naming the first field of a RunConfig that no run accepts.

    Covers what needs no data: engine, model and workload schemas, the fields only one design
    reads, load, warm-up, decode, threads and device. Runs before anything is built.
    """
    cfg.engine.validate()
    cfg.model.validate()
    cfg.workload.validate()
    _check_load(cfg.load)
    _check_warmup(cfg.warmup)
    from harness.metrics import check_metrics

    check_metrics(cfg.metrics)
    if cfg.decode not in DECODES:
        raise ValueError(f"decode must be one of {', '.join(DECODES)}, got {cfg.decode!r}")
    _require_int("threads", cfg.threads, minimum=1)
    _check_device(cfg.device)


def _check_load(load) -> None:
    from harness.load import ARRIVALS

    if load.mode != "auto":
        ARRIVALS.get(load.mode)  # UnknownNameError listing the modes
    if load.rate is not None:
        _require_number("load.rate", load.rate)
    elif load.mode == "poisson":
        raise ValueError(
            "load.rate must be a positive number of requests/s for load.mode=poisson, got None"
        )
    _require_number("load.burstiness", load.burstiness)
    _require_number("load.slowdown", load.slowdown)
    if load.max_concurrency is not None:
        _require_int("load.max_concurrency", load.max_concurrency, minimum=1)


def _check_warmup(warmup) -> None:
    _require_int("warmup.num_requests", warmup.num_requests, minimum=0)
    _require_int("warmup.prompt_len", warmup.prompt_len, minimum=1)
    _require_int("warmup.output_len", warmup.output_len, minimum=1)


def _check_device(name: str) -> None:
    import torch

    if name == "auto":
        return
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be auto, cpu or cuda[:N], got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but no CUDA device is available")


def _require_int(name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        must = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{name} must be {must}, got {value!r}")


def _require_number(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def preflight(argv: list[str]) -> str | None:
    """Return one line describing the first problem with the command line, or None.

    A sweep (`-m`) is checked for names and types only, value by value: a value of the wrong type
    would stop Hydra mid-sweep, while a job whose value is merely out of range runs and is recorded
    as failed next to the others.
    """
    if any(a in SKIP_FLAGS for a in argv):
        return None
    dirs = search_dirs(argv)
    # hydra.searchpath stays: composing a user's own config needs it.
    argv = [
        a for a in argv
        if a.startswith("hydra.searchpath=") or not a.startswith(("hydra.", "hydra/"))
    ]  # fmt: skip
    # A suite is a multirun by configuration (hydra.mode: MULTIRUN), even without -m.
    if any(a in SWEEP_FLAGS or a.lstrip("+").startswith("suite=") for a in argv):
        return _sweep_problem([a for a in argv if a not in SWEEP_FLAGS], dirs)
    return _group_problem(argv, dirs) or _compose_problem(argv, check=True)


def _group_problem(overrides: list[str], dirs: tuple[Path, ...] = ()) -> str | None:
    for arg in overrides:
        key, sep, value = arg.partition("=")
        if sep and key in GROUPS and value not in options(key, dirs):
            return f"unknown {key} {value!r}; valid: {', '.join(options(key, dirs))}"
    return None


def _sweep_problem(overrides: list[str], dirs: tuple[Path, ...] = ()) -> str | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as exc:
        return _compose_message(exc)
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    problem = _group_problem(fixed, dirs) or _compose_problem(fixed, check=False)
    for o in (o for o in parsed if o.is_sweep_override()):
        for value in o.sweep_string_iterator():
            single = [*fixed, f"{o.get_key_element()}={value}"]
            problem = (
                problem
                or _group_problem(single[-1:], dirs)
                or _compose_problem(single, check=False)
            )
    return problem


def _compose_problem(overrides: list[str], check: bool) -> str | None:
    """Compose like Hydra would; with `check`, also apply check_run_config."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    import harness.config  # noqa: F401  (registers the schemas the defaults lists name)

    try:
        with initialize_config_dir(
            config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"
        ):
            cfg = OmegaConf.to_object(compose(config_name="config", overrides=overrides))
        if check:
            check_run_config(cfg)
    except (HydraException, *BAD_INPUT) as exc:
        return _compose_message(exc)
    return None


def _compose_message(exc: BaseException) -> str:
    if _omegaconf_cause(exc) is not None:
        return describe(exc)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
