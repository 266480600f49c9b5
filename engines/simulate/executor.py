"""`executor=simulated`: the same Engine, Scheduler and PrefixCache, no model and no KV tensors.

Each step advances a `VirtualClock` by the cost model's step time and emits the scripted tokens,
with the real executor's rule; a stretch of pure decode runs as one macro-step priced step by
step (`execute_decode_run`, engines/sched/base.py `DecodeRun`). Capacity is still enforced by the
cache in blocks/tokens, and cache bookkeeping is still timed on the wall clock by the step loop
(`bookkeeping_ns`), as in a real run.
With `hardware.charge_host_time` the clock also advances by the engine loop's own CPU time between
steps, so a CPU model (where host and model share the core) sees the scheduler's cost too.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np

from engines.cache.protocol import AnyPrefixCache
from engines.cache.storage_prefetch import TimedStorageReads
from engines.cache.storage_tier import StorageTier
from engines.cache.tiers import HostTier
from engines.clock import VirtualClock
from engines.errors import BadInput
from engines.executor import DecodeRunResult, ExecutorContext
from engines.host_link import HostLinkPricing
from engines.sched.base import DecodeRun, StepPlan
from engines.sequence import Sequence
from engines.simulate.cost_model import CostModel, DecodeRunShape, HardwareConfig, build_cost_model
from engines.simulate.overlap import OverlapPricing
from engines.storage_link import StorageLinkPricing

# Decode-run steps priced per numpy call: a run ends at the next arrival, often within ~100 steps.
RUN_CHUNK_STEPS = 128


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
    cache: AnyPrefixCache
    # Advance pure-decode stretches as one macro-step (engine.decode_runs; off when host time is
    # charged, since that is measured per step).
    decode_runs: bool = True
    clock: HostMarkClock = field(default_factory=HostMarkClock)
    num_steps: int = 0
    busy_s: float = 0.0  # simulated time spent in steps (the rest of the run is idle waiting)
    host_s: float = 0.0  # host CPU time charged to the clock (charge_host_time only)
    # SGLang's overlap loop (engine.overlap): each step's CPU part hidden behind the previous
    # step's GPU part (engines/simulate/overlap.py); None prices every step whole
    overlap: OverlapPricing | None = None
    # A host tier's transfers on the preset's host link (engines/host_link.py); None: no tier
    host_link: HostLinkPricing | None = None
    # A storage tier told when each of its reads runs on the priced storage link (its prefetch
    # follows the read's clock, docs/tiers.md §10.3); None: no such tier or no priced link
    read_clock: TimedStorageReads | None = None

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
            out[seq.seq_id] = _script(seq)[num_tokens - seq.num_prompt_tokens]
        dt_s = self.cost_model.step_time_s(plan)
        if self.host_link is not None:
            tier = self.cache
            assert isinstance(tier, HostTier)
            dt_s = self.host_link.step(self.clock.now(), dt_s, tier.host_take_transfers())
            self._time_reads()
        if self.overlap is not None:
            dt_s = self.overlap.step(self.clock.now(), dt_s)
        self.clock.advance(dt_s)
        self.busy_s += dt_s
        self.num_steps += 1
        if charge_host:  # the model's own time is dt_s, not host time
            # Only then: thread_time() can cost ~0.3 ms in a busy VM, more than a whole step.
            self.clock.host_mark_s = time.thread_time()
        return out

    def host_idle(self) -> None:
        if self.host_link is not None:
            tier = self.cache
            assert isinstance(tier, HostTier)
            self.host_link.stores(self.clock.now(), tier.host_take_transfers())
            self._time_reads()

    def host_waiting(self) -> None:
        """The reads a timed storage tier logged this iteration start now (the engine may idle
        until one ends); without one, the next step takes the transfers as before."""
        if self.read_clock is not None:
            self.host_idle()

    def _time_reads(self) -> None:
        """Tell the timed storage tier when each read queued or moved up since the last call runs."""
        if self.read_clock is not None and self.host_link is not None:
            assert self.host_link.storage is not None
            for seq_id, timing in self.host_link.storage.take_timings().items():
                self.read_clock.storage_read_timed(seq_id, timing)

    def execute_decode_run(self, run: DecodeRun, until_s: float) -> DecodeRunResult:
        """Steps of `run` until its max_steps or the first that ends at or after `until_s`, each
        priced and clocked exactly as `execute` prices and clocks that step's plan."""
        end_times = self._clock_decode_steps(run, until_s)
        if self.host_link is not None and end_times:  # a run loads nothing; stores queue after it
            tier = self.cache
            assert isinstance(tier, HostTier)
            self.host_link.stores(end_times[0], tier.host_take_transfers())
            self._time_reads()
        num_steps = len(end_times)
        tokens = {}
        for seq in run.seqs:
            script = _script(seq)
            first = seq.num_output_tokens  # the token `execute` emits for this step's plan
            tokens[seq.seq_id] = list(script[first : first + num_steps])
        self.num_steps += num_steps
        return DecodeRunResult(end_times, tokens)

    def _clock_decode_steps(self, run: DecodeRun, until_s: float) -> list[float]:
        """Price the run's steps in chunks (`CostModel.run_times_s`, bit for bit the per-step
        prices) and advance the clock by each in turn, stopping at the step that reaches until_s."""
        contexts = np.fromiter((seq.num_computed_tokens for seq in run.seqs), dtype=np.int64)
        end_times: list[float] = []
        for first in range(0, run.max_steps, RUN_CHUNK_STEPS):
            steps = np.arange(first, min(first + RUN_CHUNK_STEPS, run.max_steps))
            times = self.cost_model.run_times_s(
                decode_run_shape(contexts, steps, self.cost_model.block_size)
            )
            full = times
            if self.overlap is not None:
                times = self.overlap.run(self.clock.now(), times)
            ends = list(accumulate(times.tolist(), initial=self.clock.now()))[1:]
            cut = bisect_left(ends, until_s)  # the first step that ends at or after until_s
            taken = min(cut + 1, len(ends))
            self.clock.wait_until(ends[taken - 1])  # the same sums `advance` makes step by step
            if self.overlap is not None:
                self.overlap.ran(ends[taken - 1], float(full[taken - 1]))
            self.busy_s = list(accumulate(times[:taken].tolist(), initial=self.busy_s))[-1]
            end_times += ends[:taken]
            if cut < len(ends):
                break
        return end_times


def decode_run_shape(contexts: np.ndarray, steps: np.ndarray, block_size: int) -> DecodeRunShape:
    """Shapes of `steps` of a run whose sequences start at `contexts` computed tokens: at step s
    sequence i reads c_i + s + 1 K/V tokens over cdiv(c_i + s + 1, B) = c_i // B + 1 +
    (c_i % B + s) // B blocks."""
    n, bs = len(contexts), block_size
    kv = contexts.sum() + n * steps + n
    spill = (contexts[:, None] % bs + steps[None, :]) // bs
    return DecodeRunShape(n, kv, (contexts // bs).sum() + n + spill.sum(axis=0))


def _script(seq: Sequence) -> tuple[int, ...]:
    if seq.scripted_output_ids is None:
        raise BadInput(
            f"executor=simulated has no model to sample from: request {seq.seq_id} has no "
            "scripted output (use decode=scripted)"
        )
    return seq.scripted_output_ids


def as_hardware_config(hardware: HardwareConfig | Mapping[str, Any] | None) -> HardwareConfig:
    if hardware is None:
        raise BadInput(
            "executor=simulated needs a cost model: select one with hardware=<preset> "
            "(conf/hardware/*.yaml, e.g. hardware=cpu_measured or hardware=h100_llama3_70b_fp8)"
        )
    if isinstance(hardware, HardwareConfig):
        return hardware
    return HardwareConfig(**dict(hardware))


def build_simulated_executor(ctx: ExecutorContext) -> SimulatedExecutor:
    """A cost model of `ctx.options["hardware"]` on a virtual clock (registered in engines/build.py)."""
    hardware = as_hardware_config(ctx.options.get("hardware"))
    runs = ctx.engine_config.decode_runs and not hardware.charge_host_time
    config = ctx.engine_config
    hides = config.overlap and config.scheduler_design == "sglang" and hardware.kind == "roofline"
    overlap = OverlapPricing(hardware.step_overhead_s) if hides else None
    link = simulated_host_link(hardware, ctx.cache)
    return SimulatedExecutor(
        build_cost_model(hardware, ctx.cache.block_size),
        ctx.cache,
        runs,
        overlap=overlap,
        host_link=link,
        read_clock=timed_reads(link, ctx.cache),
    )


def timed_reads(link: HostLinkPricing | None, cache: AnyPrefixCache) -> TimedStorageReads | None:
    """A storage tier that admits against its reads' clock, when the link prices storage time:
    it is told so (it no longer completes a prefetch at the next iteration), and the link keeps
    the reads' timings for it. None otherwise (no priced link: every decision as before)."""
    storage = link.storage if link is not None else None
    if storage is None or not storage.priced or not isinstance(cache, TimedStorageReads):
        return None
    storage.timed = True
    cache.storage_reads_clocked()
    return cache


def simulated_host_link(hardware: HardwareConfig, cache: AnyPrefixCache) -> HostLinkPricing | None:
    """The preset's host link for a cache with a host tier (None without one). A preset without
    `host_link_bandwidth` counts the bytes and prices no time; one without the model's KV shape
    counts nothing. A cache with a storage tier gets its storage link on it, priced the same way
    with `storage_bandwidth`."""
    if not isinstance(cache, HostTier):
        return None
    names = ("num_layers", "num_kv_heads", "head_dim", "kv_bytes_per_element")
    known = all(getattr(hardware, name) for name in names)
    link = hardware.host_link_bandwidth
    bytes_per_token = hardware.kv_bytes_per_token if known else 0.0
    storage = None
    if isinstance(cache, StorageTier):  # its reads and writes, priced with `storage_bandwidth`
        storage = StorageLinkPricing(hardware.storage_bandwidth if known else None, bytes_per_token)
    return HostLinkPricing(
        link * hardware.num_gpus if known and link else None,
        bytes_per_token,
        cache.host_load_overlap,
        hardware.num_layers or 1,
        storage,
    )
