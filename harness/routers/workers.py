"""The servers a real router fronts in a run (`fleet.workers`, docs/fleet.md §5): each kind's
checks before anything starts, its memory per worker, its name in the rows, and its start.

    builtin  N built-in servers (harness/routers/fleet.py `worker_fleet`) of the run's model and
             design, with the run's block size and KV capacity; a reply names its worker
    vllm     N vLLM-CPU servers (harness/routers/vllm_workers.py) of the local model folder
             (scripts/setup_vllm.sh), with the run's block size and KV capacity; the worker is
             read from the servers' success counters, so one request at a time
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from engines.cache import designs
from harness.config.errors import BadInput
from harness.config.footprint import GIB, engine_estimate
from harness.config.processes import VLLM_CPU_BASE_BYTES, builtin_server_bytes
from harness.config.schema import RunConfig
from harness.routers.fleet import Workers, worker_fleet

VLLM_BLOCK_MULTIPLE = 32  # vLLM-CPU's attention backend takes block sizes in multiples of 32


@dataclass(frozen=True)
class WorkerPlan:
    """What a run's workers are, decided before any of them starts."""

    label: str  # one worker, in messages and the memory check: "built-in server"
    bytes_each: int  # its resident memory, estimated
    backend: str  # the summary's `backend` and the rows' `engine`
    max_len: int  # prompt plus output tokens one request may take
    # every worker's block size: the router (kv_aware's --kv-event-block-size) and the twin's
    # index of the workers' KV events are told it too
    block_size: int
    problem: Callable[[], str | None]  # why the workers cannot start here, or None
    start: Callable[[int, Path], AbstractContextManager[Workers]]  # (count, log folder)


def worker_plan(cfg: RunConfig) -> WorkerPlan:
    """The plan of `cfg.fleet.workers`; BadInput naming the key when the run cannot have them."""
    return _vllm(cfg) if cfg.fleet.workers == "vllm" else _builtin(cfg)


def _builtin(cfg: RunConfig) -> WorkerPlan:
    engine = cfg.engine  # the workers' pool and blocks are the run's
    block = engine.block_size  # the workers', and so the router's and the twin's (fleet_layout)
    start = functools.partial(
        worker_fleet,
        model=cfg.model.name,
        engine=engine.cache,
        overrides=[f"engine.kv_capacity_tokens={engine.kv_capacity_tokens}"],
        block_size=block,
    )
    return WorkerPlan(
        label="built-in server",
        bytes_each=builtin_server_bytes(cfg.model.name, engine.cache),
        backend=engine.cache,
        max_len=cfg.model.max_position_embeddings,
        block_size=block,
        problem=lambda: None,
        start=start,
    )


def _vllm(cfg: RunConfig) -> WorkerPlan:
    from harness.live_server.launch import MODEL_DIR, MODEL_PRESET, REPO, VllmLaunch, missing
    from harness.routers.vllm_workers import vllm_workers

    served = MODEL_DIR.relative_to(REPO)
    _check_model(cfg, MODEL_PRESET, str(served))
    engine = cfg.engine
    # the designs whose upstream is vLLM's (the registry's, never a literal): the twin's cache
    vllm_designs = [d.name for d in designs() if d.upstream_scheduler == "vllm"]
    if engine.cache not in vllm_designs:
        raise BadInput(
            f"fleet.workers=vllm: the workers are vLLM servers with vLLM's own prefix cache; "
            f"engine={engine.cache} does not apply (valid: {', '.join(vllm_designs)})"
        )
    if engine.block_size % VLLM_BLOCK_MULTIPLE:
        raise BadInput(
            f"engine.block_size={engine.block_size}: vLLM-CPU workers take a multiple of "
            f"{VLLM_BLOCK_MULTIPLE} (set engine.block_size={VLLM_BLOCK_MULTIPLE})"
        )
    width = cfg.load.max_concurrency
    if width is not None and width != 1:
        raise BadInput(
            f"load.max_concurrency={width}: vLLM workers are told apart by their success "
            "counters, one request at a time; fleet.workers=vllm takes load.max_concurrency=1"
        )
    launch = VllmLaunch(
        block_size=engine.block_size, num_gpu_blocks=engine.num_blocks, eager=cfg.fleet.vllm_eager
    )
    pool = engine_estimate(engine, cfg.model, "cpu").kv_bytes
    if pool > launch.kv_space_gib * GIB:
        raise BadInput(
            f"engine.kv_capacity_tokens={engine.kv_capacity_tokens}: a vLLM-CPU worker's KV "
            f"pool would take {pool / GIB:.1f} GiB of its {launch.kv_space_gib} GiB KV space"
        )
    return WorkerPlan(
        label="vLLM-CPU server",
        bytes_each=VLLM_CPU_BASE_BYTES + launch.kv_space_gib * GIB,
        backend="vllm-server",  # the report's name for a live vLLM server's arm
        max_len=min(cfg.model.max_position_embeddings, launch.max_model_len),
        block_size=launch.block_size,
        problem=missing,
        start=functools.partial(vllm_workers, launch=launch),
    )


def _check_model(cfg: RunConfig, preset: str, folder: str) -> None:
    """The run's model must be the preset the vLLM servers' folder is built as (its shape and
    tokenizer, scripts/make_rand_model.py): the run's token ids, text and bounds are that
    model's."""
    from engines.model.presets import get_preset

    if cfg.model.name != preset:
        raise BadInput(
            f"fleet.workers=vllm: the vLLM servers serve {folder} (model={preset}); "
            f"model={cfg.model.name} cannot be served by them (use model={preset})"
        )
    want = get_preset(preset)
    changed = [
        f"model.{f.name}={getattr(cfg.model, f.name)!r}"
        for f in dataclasses.fields(want)
        if getattr(cfg.model, f.name) != getattr(want, f.name)
    ]
    if changed:
        raise BadInput(
            f"fleet.workers=vllm: {', '.join(changed)} is not the model the vLLM servers serve "
            f"({folder}, model={preset} as it ships)"
        )
