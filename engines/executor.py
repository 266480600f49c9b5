"""What an executor is: it turns a StepPlan into next tokens, and may run whole decode runs.

Two implement it: `real` (engines/real_executor.py, the model forward on the KV pool) and
`simulated` (engines/simulate/executor.py, a cost model on a virtual clock). This module needs no
torch, so a simulated run never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engines.clock import RunClock
from engines.sched.base import DecodeRun, StepPlan

if TYPE_CHECKING:
    from engines.cache.protocol import AnyPrefixCache
    from engines.config import EngineConfig
    from engines.model.config import ModelConfig


@dataclass(frozen=True)
class DecodeRunResult:
    """What an executor ran of a `DecodeRun`: one end time per step (the run clock after it) and,
    per sequence, the token each step sampled."""

    end_times_s: list[float]
    tokens: dict[str, list[int]]


class Executor(Protocol):
    """Runs one StepPlan: the model forward (real) or its priced cost (simulated)."""

    @property
    def clock(self) -> RunClock:
        """The run clock the executor advances (wall or virtual)."""
        ...

    @property
    def decode_runs(self) -> bool:
        """Whether `execute_decode_run` may be called (the real executor runs every step)."""
        ...

    def execute(self, plan: StepPlan) -> dict[str, int]:
        """Run `plan`; returns seq_id -> the token sampled for every sequence whose step reached
        its last known token."""
        ...

    def execute_decode_run(self, run: DecodeRun, until_s: float) -> DecodeRunResult:
        """Run steps of `run` until its max_steps or the first step that ends at or after
        `until_s` (only where `decode_runs`)."""
        ...


class ModelLimits(Protocol):
    """What the engine needs of a model it does not run (the simulated executor, a server's
    twin): its context length. A ModelConfig is one."""

    @property
    def max_position_embeddings(self) -> int | None: ...


@dataclass(frozen=True)
class ExecutorContext:
    """What an executor factory (engines/build.py `EXECUTORS`) builds an executor from."""

    engine_config: EngineConfig
    model_config: ModelConfig | ModelLimits  # the real executor needs a ModelConfig
    cache: AnyPrefixCache
    device: str  # as configured ("auto", "cpu", "cuda:0"); executors that need torch resolve it
    options: dict[str, Any]
