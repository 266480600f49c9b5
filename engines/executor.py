"""What an executor is: it turns a StepPlan into next tokens, and may run whole decode runs.

Two implement it: `real` (engines/real_executor.py, the model forward on the KV pool) and
`simulated` (engines/simulate/executor.py, a cost model on a virtual clock). This module needs no
torch, so a simulated run never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engines.cache.base import DecodeRun, StepPlan
from engines.clock import RunClock


@dataclass(frozen=True)
class DecodeRunResult:
    """What an executor ran of a `DecodeRun`: one end time per step (the run clock after it) and,
    per sequence, the token each step sampled."""

    end_times_s: list[float]
    tokens: dict[str, list[int]]


class Executor(Protocol):
    clock: RunClock
    # Whether `execute_decode_run(run, until_s) -> DecodeRunResult` may be called: run steps of
    # `run` until its max_steps or the first step that ends at or after `until_s`.
    decode_runs: bool

    def execute(self, plan: StepPlan) -> dict[str, int]: ...

    def execute_decode_run(self, run: DecodeRun, until_s: float) -> DecodeRunResult: ...
