"""Run-level checks: every field of a RunConfig, before anything is generated or built.

`check_run_config` validates each schema (engine, model, workload, hardware), every number of
the run (finite, in a sane range), names that become paths, the bounds and the memory the
workload and the KV pool would need. `check_requests` then checks what only the generated
workload knows (none at all, a schedule longer than a day) before the engine starts. Each problem
raises `harness.config.errors.BadInput` with one line naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from harness.config.errors import BadInput

if TYPE_CHECKING:  # the schema imports Hydra: only the type checker needs it here
    from engines.simulate.cost_model import HardwareConfig
    from harness.client.config import LoadConfig
    from harness.config.schema import BoundsConfig, RunConfig, WarmupConfig
    from workloads.request import Request

DECODES = ("greedy", "scripted")
MAX_SEED = 2**63  # seeds become 64-bit stream keys and torch generator seeds
MAX_GRANULARITY = 2**20
MAX_SCHEDULE_S = 86_400.0  # a run whose last request is released after a day is a mistake
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # names that may become file names


def check_run_config(cfg: RunConfig) -> None:
    """Raise BadInput naming the first field of a RunConfig that no run accepts."""
    from engines.build import EXECUTORS
    from harness.client.config import check_load
    from harness.config.footprint import check_footprint
    from harness.config.plausible import check_hardware, check_model_and_engine
    from harness.metrics.config import check_metrics
    from workloads.base import WorkloadParams

    if type(cfg.workload) is WorkloadParams:  # a workload file without its family schema
        raise BadInput(
            "workload: the workload config names no family schema (defaults: [base_<family>])"
        )
    cfg.engine.validate()
    cfg.model.validate()
    cfg.workload.validate()
    EXECUTORS.get(cfg.executor)  # unknown executor lists the valid ones
    check_executor_hardware(cfg.executor, cfg.hardware)
    if cfg.hardware is not None:
        cfg.hardware.validate()
        check_hardware(cfg.hardware)
    if cfg.server is not None:
        cfg.server.validate()
    cfg.fleet.validate()
    cfg.fleet.validate_engines(cfg.engine)  # a mixed fleet's replicas of each design
    if cfg.fleet.real is not None and cfg.server is not None:
        raise BadInput(
            "fleet.real starts its own workers behind the router; it cannot drive server=..."
        )
    if cfg.fleet.real is not None and cfg.executor != "real":
        raise BadInput(f"fleet.real runs real servers; executor must be real, got {cfg.executor!r}")
    if cfg.fleet.replicas > 1 and cfg.server is not None:
        raise BadInput("fleet.replicas > 1 runs in-process engines; it cannot drive server=...")
    require_name("workload.name", cfg.workload.name)
    if cfg.label is not None:
        require_name("label", cfg.label)
    require_int("seed", cfg.seed, 0, MAX_SEED - 1)
    if cfg.seed + cfg.workload.seed_offset >= MAX_SEED:
        raise BadInput(
            f"seed + workload.seed_offset must be below 2**63, got {cfg.seed + cfg.workload.seed_offset}"
        )
    require_int("model.seed", cfg.model.seed, 0, MAX_SEED - 1)
    check_load(cfg.load)
    _check_warmup(cfg.warmup, cfg.model.max_position_embeddings)
    _check_bounds(cfg.bounds)
    check_metrics(cfg.metrics)
    if cfg.decode not in DECODES:
        raise BadInput(f"decode must be one of {', '.join(DECODES)}, got {cfg.decode!r}")
    if cfg.executor == "simulated" and cfg.decode != "scripted":
        raise BadInput(
            "decode must be scripted for executor=simulated: it has no model to sample from"
        )
    require_int("threads", cfg.threads, 1, 1024)
    check_device(cfg.device)
    check_footprint(cfg)  # sizes that need more memory than there is: the estimate says how much
    check_model_and_engine(cfg.model, cfg.engine)  # sizes no model or engine has


def check_executor_hardware(executor: str, hardware: HardwareConfig | None) -> None:
    """A cost model belongs to the simulated executor and it needs one: refused here, before a run
    directory exists, rather than as a failed run (or a preset silently ignored)."""
    if executor == "simulated" and hardware is None:
        raise BadInput(
            "executor=simulated needs a cost model: select one with hardware=<preset> "
            "(conf/hardware/*.yaml, e.g. hardware=cpu_measured or hardware=h100_llama3_70b_fp8)"
        )
    if executor != "simulated" and hardware is not None:
        raise BadInput(
            f"hardware={getattr(hardware, 'name', hardware)} is the simulated executor's cost model "
            f"and executor={executor} would ignore it: add executor=simulated, or drop hardware="
        )


def check_known_keys(node, path: str = "") -> None:
    """Refuse a key that no schema has (`+engine.blocksize=32`): Hydra's `+` adds it to the
    structured config, and converting to the dataclass would then drop it without a word."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig) or node._is_none():  # an unset group (hardware: None)
        return
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        valid = {f.name for f in dataclasses.fields(schema)}
        unknown = sorted(str(k) for k in node if k not in valid)
        if unknown:
            where = f"{path}.{unknown[0]}" if path else unknown[0]
            raise BadInput(f"unknown field {where}; valid: {', '.join(sorted(valid))}")
    for key, child in node.items_ex(resolve=False):
        if key != "hydra":
            name = str(key)
            check_known_keys(child, f"{path}.{name}" if path else name)


def check_requests(requests: Sequence[Request], load: LoadConfig) -> None:
    """What only the generated workload shows: no requests at all, or a day-long schedule."""
    if not requests:
        raise BadInput("the workload produced no requests (an empty trace or dataset?)")
    chains: dict[str, float] = {}  # request id -> latest release of its dependency chain
    for r in requests:
        start = chains.get(r.after, 0.0) + r.think_s if r.after else r.arrival_s
        chains[r.request_id] = start
    last_s = max(chains.values())
    if not last_s <= MAX_SCHEDULE_S:
        raise BadInput(
            f"the last request would be released {last_s:,.0f} s after the start (arrival times x "
            f"load.slowdown {load.slowdown:g} plus think times); the limit is {MAX_SCHEDULE_S:,.0f} s"
        )


def _check_warmup(warmup: WarmupConfig, context: int) -> None:
    require_int("warmup.num_requests", warmup.num_requests, 0, 10_000)
    require_int("warmup.prompt_len", warmup.prompt_len, 1, context)
    require_int("warmup.output_len", warmup.output_len, 1, context)


def _check_bounds(bounds: BoundsConfig) -> None:
    values = list(bounds.granularities)
    for i, g in enumerate(values):
        require_int(f"bounds.granularities[{i}]", g, 1, MAX_GRANULARITY)
    require_int("bounds.max_fine_prompt_tokens", bounds.max_fine_prompt_tokens, 1, 2**62)


def check_device(name: str) -> None:
    if name == "auto":
        return
    import torch  # only for a named device: a simulated run on "auto" never imports torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise BadInput(f"device must be auto, cpu or cuda[:N], got {name!r}") from None
    if device.type not in ("cpu", "cuda"):  # meta, mps, xpu ...: torch parses them, the engine
        # supports none (meta tensors hold no data; the kernels are CPU or CUDA only)
        raise BadInput(f"device must be auto, cpu or cuda[:N], got {name!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BadInput(f"device {name!r} was asked for but no CUDA device is available")


def require_int(name: str, value: object, minimum: int, maximum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise BadInput(f"{name} must be an integer in [{minimum}, {maximum}], got {value!r}")


def require_number(name: str, value: object, maximum: float) -> None:
    """A finite number in (0, maximum]: NaN and infinity never reach the engine loop."""
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and 0 < value <= maximum
        and math.isfinite(value)
    )
    if not ok:
        raise BadInput(f"{name} must be a positive finite number <= {maximum:g}, got {value!r}")


def require_name(name: str, value: object) -> None:
    """Names that end up in directory and figure names: letters, digits and . _ + - only."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or len(value) > 100:
        raise BadInput(
            f"{name} must be 1-100 letters, digits or . _ + - (starting with a letter or digit), got {value!r}"
        )
