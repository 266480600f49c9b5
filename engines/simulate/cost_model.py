"""Step-time cost models: how long one scheduled step would take on some hardware.

A step is reduced to its shape (`StepShape`: new tokens, cached context per sequence, batch size).
`roofline` prices it on a GPU from datasheet numbers and the model's shape; `fitted` uses
coefficients measured on this CPU by `engines.simulate.calibrate`. `HardwareConfig` names every
constant; it is the Hydra schema of the `hardware` group (`conf/hardware/*.yaml`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol, cast

import numpy as np

from engines.errors import BadInput
from engines.registry import Registry
from engines.sched.base import StepPlan


@dataclass
class HardwareConfig:
    """Every constant of a cost model. None means "not stated"; a kind that needs it refuses it."""

    name: str = "custom"
    description: str = ""
    kind: str = "roofline"  # roofline | fitted (COST_MODELS)
    # --- device (per GPU; num_gpus is the tensor-parallel degree, compute and bandwidth scale) ---
    num_gpus: int = 1
    peak_flops: float | None = None  # dense FLOP/s of one GPU at the preset's precision
    flops_utilization: float | None = None  # fraction of peak a prefill reaches (MFU)
    memory_bandwidth: float | None = None  # HBM bytes/s of one GPU
    bandwidth_efficiency: float | None = None  # fraction of HBM bandwidth a decode step reaches
    gpu_memory_bytes: float | None = None  # HBM of one GPU (sizes KV capacity, not step time)
    memory_fraction: float = 0.9  # share of HBM the engine may use (vLLM gpu_memory_utilization)
    interconnect_bandwidth: float | None = None  # all-reduce bus bytes/s per GPU (TP > 1 only)
    allreduce_latency_s: float = 0.0  # fixed cost of one all-reduce (TP > 1 only)
    activation_bytes: float = 2.0  # bytes per activation element crossing the interconnect
    # --- host link: KV tier transfers between GPU and host memory, bytes/s one way per GPU (the
    # link is full duplex: loads and stores each get this; with TP each GPU moves its own shard,
    # so the engine's link is num_gpus times it). None: a tier's transfers are not priced ---
    host_link_bandwidth: float | None = None
    # --- storage link: a storage tier's reads (storage -> host memory) and writes (host memory ->
    # storage), bytes/s each way for the whole node (the engine's one drive or array, however many
    # GPUs). None: a storage tier's transfers are counted, not priced (docs/tiers.md §10.3) ---
    storage_bandwidth: float | None = None
    # --- model shape ---
    num_params: float | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    bytes_per_param: float | None = None
    kv_bytes_per_element: float | None = None
    # --- fixed per-step cost (launches, sampling, scheduling not overlapped with the GPU) ---
    step_overhead_s: float = 0.0
    # Also advance the virtual clock by the host CPU time the engine loop spends between steps
    # (scheduler, cache bookkeeping), measured for real: true where the host work runs serially
    # with the model on the same CPU (cpu_measured); false keeps replays deterministic.
    charge_host_time: bool = False
    # --- fitted coefficients (kind=fitted): time = overhead + sum(coef * feature), FITTED_TERMS ---
    fit_per_token_s: float = 0.0
    fit_per_attention_pair_s: float = 0.0
    fit_per_prefill_seq_s: float = 0.0
    fit_per_decode_seq_s: float = 0.0
    fit_per_kv_token_s: float = 0.0
    fit_per_kv_block_s: float = 0.0  # per KV block read: gathers cost per index, not only per byte
    # KV tokens a step can read before its working set leaves the CPU caches (None: no knee);
    # each token beyond it costs fit_per_kv_token_beyond_cache_s more (DRAM instead of cache).
    fit_cache_kv_tokens: int | None = None
    fit_per_kv_token_beyond_cache_s: float = 0.0

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of one token across all layers: 2 * layers * kv_heads * head_dim * bytes."""
        need = self.need
        return (
            2
            * need("num_layers")
            * need("num_kv_heads")
            * need("head_dim")
            * need("kv_bytes_per_element")
        )

    def kv_capacity_tokens(self) -> int:
        """KV tokens that fit in `memory_fraction` of all GPUs' HBM after the weights."""
        self._require("gpu_memory_bytes", "num_params", "bytes_per_param")
        usable = self.num_gpus * self.need("gpu_memory_bytes") * self.memory_fraction
        free = usable - self.need("num_params") * self.need("bytes_per_param")
        if free <= 0:
            raise BadInput(
                f"hardware {self.name}: the weights do not fit in {self.num_gpus} GPU(s)"
            )
        return int(free // self.kv_bytes_per_token)

    def validate(self) -> None:
        """Raise BadInput naming the field for a kind that lacks a constant it needs."""
        COST_MODELS.get(self.kind)  # unknown kind lists the valid ones
        if not isinstance(self.num_gpus, int) or self.num_gpus <= 0:
            raise BadInput(f"hardware.num_gpus must be a positive integer, got {self.num_gpus!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and not 0 <= value < math.inf
            ):
                raise BadInput(f"hardware.{f.name} must be a finite number >= 0, got {value!r}")

    def _require(self, *names: str) -> None:
        for name in names:
            self.need(name)

    def need(self, name: str) -> float:
        """The constant `name` (an int or a float, unchanged), which the caller needs > 0."""
        value = getattr(self, name)
        if value is None or value <= 0:
            raise BadInput(f"hardware {self.name} (kind {self.kind}) needs hardware.{name} > 0")
        return cast(float, value)


class StepShape(NamedTuple):
    """What a step costs depends on: per sequence, cached context `c` and new tokens `n`, and the
    KV block size B that addresses them."""

    num_seqs: int
    num_new_tokens: int  # sum n
    num_prefill_seqs: int  # sequences with n > 1 (prefill or extend)
    attention_pairs: float  # sum n * (c + n / 2): query-key pairs of causal attention
    num_kv_tokens: int  # sum (c + n): K/V read (and written) this step
    num_kv_blocks: int  # sum ceil((c + n) / B): block-table entries the step reads

    @classmethod
    def of(
        cls, contexts: Iterable[int], new_tokens: Iterable[int], block_size: int = 1
    ) -> StepShape:
        return cls.of_pairs(zip(contexts, new_tokens), block_size)

    @classmethod
    def of_plan(cls, plan: StepPlan, block_size: int = 1) -> StepShape:
        return cls.of_pairs(((it.start, it.num_new_tokens) for it in plan.scheduled), block_size)

    @classmethod
    def of_pairs(cls, pairs_cn: Iterable[tuple[int, int]], block_size: int = 1) -> StepShape:
        """One pass over (context, new tokens) pairs (once per simulated step: no copies)."""
        num_seqs = num_new = num_prefill = num_kv = num_blocks = 0
        pairs = 0.0
        for c, n in pairs_cn:
            num_seqs += 1
            num_new += n
            num_prefill += n > 1
            pairs += n * (c + n / 2)
            num_kv += c + n
            num_blocks += -(-(c + n) // block_size)
        return cls(num_seqs, num_new, num_prefill, pairs, num_kv, num_blocks)


class DecodeRunShape(NamedTuple):
    """The steps of a decode run (engines/sched/base.py `DecodeRun`) as arrays over its steps.

    Step s schedules one new token for each of `num_seqs` sequences and reads `num_kv_tokens[s]`
    K/V tokens over `num_kv_blocks[s]` block-table entries. `as_step_shape` is the StepShape of
    every step at once (array fields): attention_pairs = (num_kv_tokens - num_seqs) + num_seqs / 2
    is the sum of c + 1/2 that `StepShape.of_pairs` makes, exact in floats (integers and halves).
    """

    num_seqs: int
    num_kv_tokens: np.ndarray  # int64 per step
    num_kv_blocks: np.ndarray  # int64 per step

    def as_step_shape(self) -> StepShape:
        n = self.num_seqs
        pairs = (self.num_kv_tokens - n).astype(np.float64) + 0.5 * n
        # Array fields typed as the scalars they stand for: every use of a StepShape field is an
        # element-wise arithmetic operation, which numpy applies per step.
        kv, blocks = cast(int, self.num_kv_tokens), cast(int, self.num_kv_blocks)
        return StepShape(n, n, 0, cast(float, pairs), kv, blocks)


class CostModel(Protocol):
    hardware: HardwareConfig
    block_size: int  # of the cache whose steps it prices

    def step_time_s(self, plan: StepPlan) -> float: ...

    def shape_time_s(self, shape: StepShape) -> float: ...

    def run_times_s(self, run: DecodeRunShape) -> np.ndarray:
        """`shape_time_s` of every step of a decode run, bit for bit (IEEE operations in the
        same order, element-wise)."""
        ...


COST_MODELS: Registry[Callable[[HardwareConfig, int], CostModel]] = Registry("cost model kind")


class StepCost(NamedTuple):
    """A roofline step time split into its parts (seconds)."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s


@COST_MODELS.register("roofline")
class RooflineCostModel:
    """max(compute, memory) + tensor-parallel all-reduces + a fixed per-step overhead.

    compute: 2 * params * tokens (the dense layers) + 4 * layers * heads * head_dim * pairs
             (QK^T and PV), at peak_flops * num_gpus * flops_utilization.
    memory:  the weights once + K/V of every context and new token, at memory_bandwidth *
             num_gpus * bandwidth_efficiency.
    Prefill lands on the compute side, decode on the memory side; the max picks the binding one.
    """

    def __init__(self, hardware: HardwareConfig, block_size: int = 1) -> None:
        hardware.validate()
        self.block_size = block_size  # GPU kernels read pages at any size at the same bandwidth
        hardware._require(
            "peak_flops",
            "flops_utilization",
            "memory_bandwidth",
            "bandwidth_efficiency",
            "num_params",
            "num_layers",
            "hidden_size",
            "num_heads",
            "head_dim",
            "bytes_per_param",
        )
        if hardware.num_gpus > 1:
            hardware._require("interconnect_bandwidth")
        self.hardware = hw = hardware
        need = hw.need
        self._flops_per_s = need("peak_flops") * hw.num_gpus * need("flops_utilization")
        self._bytes_per_s = need("memory_bandwidth") * hw.num_gpus * need("bandwidth_efficiency")
        self._attn_flops_per_pair = 4 * need("num_layers") * need("num_heads") * need("head_dim")
        self._num_params = need("num_params")
        self._weight_bytes = self._num_params * need("bytes_per_param")
        self._kv_bytes_per_token = hw.kv_bytes_per_token
        self._num_layers = need("num_layers")
        self._hidden_size = need("hidden_size")
        # the interconnect only carries all-reduces with more than one GPU
        self._interconnect = need("interconnect_bandwidth") if hw.num_gpus > 1 else 0.0

    def cost(self, shape: StepShape) -> StepCost:
        hw = self.hardware
        flops = (
            2 * self._num_params * shape.num_new_tokens
            + self._attn_flops_per_pair * shape.attention_pairs
        )
        num_bytes = self._weight_bytes + self._kv_bytes_per_token * shape.num_kv_tokens
        return StepCost(
            compute_s=flops / self._flops_per_s,
            memory_s=num_bytes / self._bytes_per_s,
            comm_s=self._comm_s(shape.num_new_tokens),
            overhead_s=hw.step_overhead_s,
        )

    def _comm_s(self, num_tokens: int) -> float:
        """Two ring all-reduces of the hidden states per layer (after attention and after MLP)."""
        hw = self.hardware
        if hw.num_gpus == 1:
            return 0.0
        payload = num_tokens * self._hidden_size * hw.activation_bytes
        ring = 2 * (hw.num_gpus - 1) / hw.num_gpus * payload / self._interconnect
        return 2 * self._num_layers * (hw.allreduce_latency_s + ring)

    def shape_time_s(self, shape: StepShape) -> float:
        return self.cost(shape).total_s

    def step_time_s(self, plan: StepPlan) -> float:
        return self.shape_time_s(StepShape.of_plan(plan, self.block_size))

    def run_times_s(self, run: DecodeRunShape) -> np.ndarray:
        """`cost(shape).total_s` of every step: `cost` on array fields, then StepCost.total_s's
        sum element-wise."""
        c = self.cost(run.as_step_shape())
        return np.asarray(np.maximum(c.compute_s, c.memory_s) + c.comm_s + c.overhead_s)


# (coefficient field, feature of the step shape given the knee fit_cache_kv_tokens).
# calibrate.py fits these same terms.
FITTED_TERMS: tuple[tuple[str, Callable[[StepShape, int | None], float]], ...] = (
    ("step_overhead_s", lambda s, knee: 1.0),
    ("fit_per_token_s", lambda s, knee: s.num_new_tokens),
    ("fit_per_attention_pair_s", lambda s, knee: s.attention_pairs),
    ("fit_per_prefill_seq_s", lambda s, knee: s.num_prefill_seqs),
    ("fit_per_decode_seq_s", lambda s, knee: s.num_seqs - s.num_prefill_seqs),
    ("fit_per_kv_token_s", lambda s, knee: s.num_kv_tokens),
    ("fit_per_kv_block_s", lambda s, knee: s.num_kv_blocks),
    (
        "fit_per_kv_token_beyond_cache_s",
        lambda s, knee: 0 if knee is None else np.maximum(0, s.num_kv_tokens - knee),
    ),
)


def fitted_features(shape: StepShape, cache_kv_tokens: int | None) -> list[float]:
    return [float(feature(shape, cache_kv_tokens)) for _, feature in FITTED_TERMS]


@COST_MODELS.register("fitted")
class FittedCostModel:
    """A linear model over the step shape, coefficients measured on real hardware (FITTED_TERMS)."""

    def __init__(self, hardware: HardwareConfig, block_size: int = 1) -> None:
        hardware.validate()
        self.hardware = hardware
        self.block_size = block_size
        self._coefs = [float(getattr(hardware, name)) for name, _ in FITTED_TERMS]
        self._knee = hardware.fit_cache_kv_tokens
        if not any(self._coefs):
            raise BadInput(f"hardware {hardware.name} (kind fitted) has every coefficient at 0")

    def shape_time_s(self, shape: StepShape) -> float:
        # A fit may dip below zero far outside its grid; a step never takes negative time.
        return max(0.0, sum(c * f for c, f in zip(self._coefs, fitted_features(shape, self._knee))))

    def step_time_s(self, plan: StepPlan) -> float:
        return self.shape_time_s(StepShape.of_plan(plan, self.block_size))

    def run_times_s(self, run: DecodeRunShape) -> np.ndarray:
        """`shape_time_s` of every step: FITTED_TERMS on array fields, summed in the same order."""
        shape = run.as_step_shape()
        total: float | np.ndarray = 0
        for coef, (_, feature) in zip(self._coefs, FITTED_TERMS):
            total = total + coef * np.asarray(feature(shape, self._knee), dtype=np.float64)
        return np.asarray(np.maximum(0.0, total))


def build_cost_model(hardware: HardwareConfig, block_size: int = 1) -> CostModel:
    """The cost model of `hardware.kind` for a cache of `block_size`; an unknown kind fails
    listing the valid ones."""
    return COST_MODELS.get(hardware.kind)(hardware, block_size)
