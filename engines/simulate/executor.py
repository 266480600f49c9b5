"""`executor=simulated`: the same Engine, Scheduler and PrefixCache, no model and no KV tensors.

Each step advances a `VirtualClock` by the cost model's step time and emits the scripted tokens,
with the real executor's rule. Capacity is still enforced by the cache in blocks/tokens, and cache
bookkeeping is still timed on the wall clock by the Scheduler (`bookkeeping_ns`), as in a real run.
With `hardware.charge_host_time` the clock also advances by the engine loop's own CPU time between
steps, so a CPU model (where host and model share the core) sees the scheduler's cost too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from engines.build import EXECUTORS, ExecutorContext
from engines.cache.base import PrefixCache, StepPlan
from engines.clock import VirtualClock
from engines.errors import BadInput
from engines.simulate.cost_model import CostModel, HardwareConfig, build_cost_model


class HostMarkClock(VirtualClock):
    """A VirtualClock that remembers when host CPU time was last charged (reset with the run)."""

    def __init__(self) -> None:
        super().__init__()
        self.host_mark_s = time.thread_time()

    def restart(self) -> None:
        super().restart()
        self.host_mark_s = time.thread_time()


@dataclass
class SimulatedExecutor:
    cost_model: CostModel
    cache: PrefixCache
    clock: HostMarkClock = field(default_factory=HostMarkClock)
    num_steps: int = 0
    busy_s: float = 0.0  # simulated time spent in steps (the rest of the run is idle waiting)
    host_s: float = 0.0  # host CPU time charged to the clock (charge_host_time only)

    @property
    def device(self) -> str:
        return f"simulated:{self.cost_model.hardware.name}"

    def execute(self, plan: StepPlan) -> dict[str, int]:
        items = plan.scheduled
        if not items:
            return {}
        charge_host = self.cost_model.hardware.charge_host_time
        if charge_host:
            host_s = time.thread_time() - self.clock.host_mark_s
            self.clock.advance(host_s)
            self.host_s += host_s
        out: dict[str, int] = {}
        for it in items:  # `next_token` inlined: this loop runs once per sequence per step
            seq = it.seq
            num_tokens = len(seq.token_ids)
            if it.start + it.num_new_tokens != num_tokens:
                continue  # a prefill chunk that has not reached the last known token
            script = seq.scripted_output_ids
            if script is None:
                raise BadInput(
                    f"executor=simulated has no model to sample from: request {seq.seq_id} has no "
                    "scripted output (use decode=scripted)"
                )
            out[seq.seq_id] = script[num_tokens - seq.num_prompt_tokens]
        dt_s = self.cost_model.step_time_s(plan)
        self.clock.advance(dt_s)
        self.busy_s += dt_s
        self.num_steps += 1
        if charge_host:  # the model's own time is dt_s, not host time
            # Only then: thread_time() can cost ~0.3 ms in a busy VM, more than a whole step.
            self.clock.host_mark_s = time.thread_time()
        return out


def as_hardware_config(hardware: HardwareConfig | Mapping | None) -> HardwareConfig:
    if hardware is None:
        raise BadInput(
            "executor=simulated needs a cost model: select one with hardware=<preset> "
            "(harness/conf/hardware/*.yaml, e.g. hardware=cpu_measured or hardware=h100_llama3_70b_fp8)"
        )
    if isinstance(hardware, HardwareConfig):
        return hardware
    return HardwareConfig(**dict(hardware))


@EXECUTORS.register("simulated")
def _simulated_executor(ctx: ExecutorContext) -> SimulatedExecutor:
    hardware = as_hardware_config(ctx.options.get("hardware"))
    return SimulatedExecutor(build_cost_model(hardware, ctx.cache.block_size), ctx.cache)
