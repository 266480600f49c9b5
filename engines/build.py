"""Assemble an Engine from configs: cache + scheduler design, step loop, executor (from a registry).

`build_engine` is the one entry point the harness and scripts use; it needs no Hydra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.clock import WallClock
from engines.config import EngineConfig
from engines.engine import Engine
from engines.errors import BadInput
from engines.executor import Executor, ExecutorContext, ModelLimits
from engines.frontend import FRONTENDS
from engines.loop import StepLoop
from engines.registry import Registry
from engines.sched.base import StepBudget, build_scheduler
from engines.simulate.executor import build_simulated_executor

if TYPE_CHECKING:
    import torch

    from engines.model.config import ModelConfig


def build_real_executor(ctx: ExecutorContext) -> Executor:
    """The model forward on a paged KV pool sized to the cache, on the wall clock."""
    from engines.attention.backend import get_attention_backend
    from engines.kv_pool import KVPool
    from engines.model.config import ModelConfig
    from engines.model.weights import build_model
    from engines.real_executor import RealExecutor

    mc = ctx.model_config
    if not isinstance(mc, ModelConfig):
        raise BadInput(
            f"executor=real runs a model: it needs a ModelConfig, not {type(mc).__name__}"
        )
    device = resolve_device(ctx.device)
    model = build_model(mc, device)
    kv_pool = KVPool(
        num_layers=mc.num_layers,
        num_blocks=ctx.cache.num_blocks,
        block_size=ctx.cache.block_size,
        num_kv_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        dtype=mc.torch_dtype,
        device=device,
    )
    attn = get_attention_backend(ctx.engine_config.backend, device)
    return RealExecutor(
        model,
        kv_pool,
        attn,
        ctx.cache,
        WallClock(),
        device,
        max_num_seqs=ctx.engine_config.max_num_seqs,
        cuda_graphs=cuda_graphs_mode(ctx.engine_config, device) != "off",
        max_model_len=min(mc.max_position_embeddings, ctx.cache.capacity_tokens),
    )


def cuda_graphs_mode(config: EngineConfig, device: torch.device) -> str:
    """What `engine.cuda_graphs` means on `device` (the manifest records it): "captured" (decode
    steps replay CUDA graphs: CUDA and the triton backend), "eager" (the same padded decode path
    without capture: asked for where graphs cannot be captured) or "off". None, the default, is
    "captured" where possible and "off" elsewhere."""
    from engines.attention.triton_paged import HAS_TRITON
    from engines.real_executor import GRAPH_SAFE_BACKENDS

    backend = config.backend
    if backend == "auto":  # as engines/attention/backend.py resolves it
        backend = "triton" if device.type == "cuda" and HAS_TRITON else "torch"
    capturable = device.type == "cuda" and backend in GRAPH_SAFE_BACKENDS
    if config.cuda_graphs is None:
        return "captured" if capturable else "off"
    if not config.cuda_graphs:
        return "off"
    return "captured" if capturable else "eager"


# registry: every executor (name -> factory)
EXECUTORS: Registry[Callable[[ExecutorContext], Executor]] = Registry("executor")
EXECUTORS.add("real", build_real_executor)
EXECUTORS.add("simulated", build_simulated_executor)


def resolve_device(name: str = "auto") -> torch.device:
    import torch  # here, not at the top: a simulated run never imports torch (~2.5 s)

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def frontend_name(engine_config: EngineConfig) -> str:
    """The front stage: the scheduler design's, or SGLang's scheduler without SGLang's frontend."""
    design = engine_config.scheduler_design
    if design == "sglang" and not engine_config.sglang_frontend:
        return "sglang-off"
    return design


def build_engine(
    engine_config: EngineConfig,
    model_config: ModelConfig | ModelLimits,
    executor: str = "real",
    device: str = "auto",
    **options: Any,
) -> Engine:
    engine_config.validate()
    scheduler = build_scheduler(engine_config)
    budget = StepBudget(engine_config.max_num_seqs, engine_config.max_num_batched_tokens)
    loop = StepLoop(
        scheduler, budget, debug_checks=engine_config.debug_checks, step_log=engine_config.step_log
    )
    ctx = ExecutorContext(engine_config, model_config, scheduler.cache, device, options)
    exe = EXECUTORS.get(executor)(ctx)
    frontend = FRONTENDS.get(frontend_name(engine_config))
    max_model_len = getattr(model_config, "max_position_embeddings", None)
    return Engine(
        loop,
        exe,
        frontend,
        max_model_len=max_model_len,
        blocking_forward=engine_config.overlap_blocking_forward,
    )
