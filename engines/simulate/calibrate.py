"""Calibrate the `fitted` cost model: time the real executor on a grid of step shapes, fit, report.

Each grid point is `batch` sequences with `context` cached tokens and `new` new tokens each
(decode: new = 1), laid out contiguously in a real KV pool and run through `RealExecutor.execute`
(metadata, model forward with the chosen attention backend, logits, next token). Steps are timed
in CPU time of the calling thread (torch runs on it with 1 thread), so other processes on a shared
machine do not inflate them: the fit describes an otherwise idle CPU. The median of the repeats is
fitted by non-negative, relative-error-weighted least squares over FITTED_TERMS.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from engines.attention.backend import get_attention_backend
from engines.cache.addressing import TableJournal
from engines.clock import WallClock
from engines.kv_pool import KVPool
from engines.model.config import ModelConfig
from engines.model.llama import LlamaModel
from engines.model.weights import build_model
from engines.real_executor import RealExecutor
from engines.sched.base import ScheduledSeq, StepPlan
from engines.sequence import Sequence
from engines.simulate.cost_model import FITTED_TERMS, HardwareConfig, StepShape, fitted_features


@dataclass(frozen=True)
class GridPoint:
    phase: str  # prefill | decode | mixed (one prefill chunk plus `batch` decodes)
    num_new_tokens: int  # per prefill sequence (decode sequences add 1 each)
    context_len: int  # cached tokens of every sequence
    batch_size: int
    block_size: int = 16  # KV block size of the layout (APC 16, radix page 1)

    def shape_lists(self) -> tuple[list[int], list[int]]:
        """(contexts, new tokens) of the step's sequences."""
        if self.phase == "decode":
            return [self.context_len] * self.batch_size, [1] * self.batch_size
        if self.phase == "prefill":
            return [self.context_len] * self.batch_size, [self.num_new_tokens] * self.batch_size
        return [self.context_len] * (self.batch_size + 1), [self.num_new_tokens] + [
            1
        ] * self.batch_size


def default_grid() -> list[GridPoint]:
    """About 60 shapes spanning chunked prefill (<= 2048 tokens a step), extend and decode at
    block size 16, plus the KV-heavy shapes again at block size 1 (radix's page size)."""
    grid = [
        GridPoint("prefill", new, ctx, b)
        for new in (32, 128, 512, 2048)
        for ctx in (0, 2048, 8192)
        for b in (1, 4)
        if new * b <= 2048
    ]
    grid += [GridPoint("decode", 1, ctx, b) for ctx in (128, 1024, 4096) for b in (1, 4, 16, 64)]
    grid += [GridPoint("decode", 1, 8192, b) for b in (1, 8)]
    grid += [
        GridPoint("mixed", new, ctx, b)
        for new in (256, 1024)
        for ctx in (1024, 4096)
        for b in (8, 32)
    ]
    grid += [GridPoint("prefill", new, ctx, 1, 1) for new in (128, 1024) for ctx in (2048, 8192)]
    grid += [GridPoint("decode", 1, ctx, b, 1) for ctx in (512, 2048) for b in (4, 16, 32)]
    grid += [GridPoint("mixed", 512, ctx, 16, 1) for ctx in (512, 2048)]
    return grid


@dataclass(frozen=True)
class Measurement:
    point: GridPoint
    shape: StepShape
    median_s: float
    times_s: tuple[float, ...]


class _ContiguousLayout:
    """Stands in for a cache's block addressing: each sequence owns a contiguous run of blocks."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._tables: dict[str, list[int]] = {}
        self._next_block = 1  # block 0 is reserved
        self.table_journal = TableJournal(enabled=True)

    def place(self, seq: Sequence) -> None:
        num_blocks = -(-seq.num_tokens // self.block_size)
        self._tables[seq.seq_id] = list(range(self._next_block, self._next_block + num_blocks))
        self._next_block += num_blocks
        self.table_journal.write(seq.seq_id, 0)

    def block_table(self, seq: Sequence) -> list[int]:
        return self._tables[seq.seq_id]

    def block_ids_from(self, seq_id: str, start: int) -> list[int]:
        return self._tables[seq_id][start:]


def _plan(
    point: GridPoint, layout: _ContiguousLayout, vocab_size: int, gen: torch.Generator
) -> StepPlan:
    contexts, news = point.shape_lists()
    plan = StepPlan()
    for i, (c, n) in enumerate(zip(contexts, news)):
        ids = torch.randint(0, vocab_size, (c + n,), generator=gen).tolist()
        seq = Sequence(f"cal{i}", ids, c + n, 1, scripted_output_ids=(0,))
        layout.place(seq)
        plan.scheduled.append(ScheduledSeq(seq, c, n))
    return plan


def pool_tokens(grid: list[GridPoint], block_size: int) -> int:
    """Pool tokens the largest point of `block_size` needs (sequences rounded to whole blocks)."""

    def need(p: GridPoint) -> int:
        contexts, news = p.shape_lists()
        return sum(-(-(c + n) // block_size) * block_size for c, n in zip(contexts, news))

    return max(need(p) for p in grid if p.block_size == block_size)


def measure(
    model_config: ModelConfig,
    grid: list[GridPoint],
    repeats: int = 3,
    backend: str = "torch",
    seed: int = 0,
) -> list[Measurement]:
    """Median thread CPU time of `RealExecutor.execute` per grid point (round 0 is a warm-up).

    Call with `torch.set_num_threads(1)`: with more threads, work on the others is not counted."""
    device = torch.device("cpu")
    model = build_model(model_config, device)
    mc = model_config
    pools = {
        b: KVPool.for_capacity(
            pool_tokens(grid, b),
            mc.num_layers,
            b,
            mc.num_kv_heads,
            mc.head_dim,
            mc.torch_dtype,
            device,
        )
        for b in sorted({p.block_size for p in grid})
    }
    attn = get_attention_backend(backend, device)
    gen = torch.Generator().manual_seed(seed)
    executors, plans = [], []
    for point in grid:
        layout = _ContiguousLayout(point.block_size)  # every point reuses its pool from block 1
        plans.append(_plan(point, layout, mc.vocab_size, gen))
        executors.append(
            RealExecutor(model, pools[point.block_size], attn, layout, WallClock(), device)
        )
    # Rounds over the whole grid: a burst of load from another process then perturbs one repeat
    # of many points instead of every repeat of one point.
    times: list[list[float]] = [[] for _ in grid]
    for round_index in range(repeats + 1):
        for i, (executor, plan) in enumerate(zip(executors, plans)):
            t0 = time.thread_time()
            executor.execute(plan)
            if round_index:
                times[i].append(time.thread_time() - t0)
    return [
        Measurement(
            point, StepShape.of_plan(plan, point.block_size), float(np.median(ts)), tuple(ts)
        )
        for point, plan, ts in zip(grid, plans, times)
    ]


@dataclass(frozen=True)
class Fit:
    coefficients: dict[str, float]  # HardwareConfig field -> value (FITTED_TERMS)
    cache_kv_tokens: int | None  # the knee chosen
    predicted_s: tuple[float, ...]
    r2: float
    median_abs_rel_error: float
    max_abs_rel_error: float


# Candidate knees (KV tokens a step reads before leaving the CPU caches); None fits no knee.
KNEE_CANDIDATES: tuple[int | None, ...] = (None, 8192, 16384, 24576, 32768, 49152, 65536)


def fit(measurements: list[Measurement], knees: tuple[int | None, ...] = KNEE_CANDIDATES) -> Fit:
    """The best fit (least weighted squared error) over the candidate knees."""
    fits = [_fit_at(measurements, knee) for knee in knees]
    return min(fits, key=lambda f: f[1])[0]


def _fit_at(measurements: list[Measurement], knee: int | None) -> tuple[Fit, float]:
    """Non-negative least squares on relative error: rows are scaled by 1 / measured time.

    Negative coefficients are dropped (set to 0) one at a time and the rest refitted, so every
    term keeps a physical meaning (time never shrinks when work grows).
    """
    x = np.array([fitted_features(m.shape, knee) for m in measurements])
    y = np.array([m.median_s for m in measurements])
    w = 1.0 / y
    active = [j for j in range(x.shape[1]) if x[:, j].any()]
    while True:
        coef_active, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        worst = int(np.argmin(coef_active))
        if coef_active[worst] >= 0 or len(active) == 1:
            break
        active.pop(worst)
    coef = np.zeros(x.shape[1])
    coef[active] = np.maximum(coef_active, 0.0)
    pred = x @ coef
    rel = np.abs(pred - y) / y
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / float(np.sum((y - y.mean()) ** 2))
    names = [name for name, _ in FITTED_TERMS]
    result = Fit(
        coefficients={n: float(c) for n, c in zip(names, coef)},
        cache_kv_tokens=knee,
        predicted_s=tuple(float(p) for p in pred),
        r2=r2,
        median_abs_rel_error=float(np.median(rel)),
        max_abs_rel_error=float(np.max(rel)),
    )
    return result, float(np.sum(rel**2))


def hardware_config(model_config: ModelConfig, result: Fit, description: str) -> HardwareConfig:
    """The `fitted` preset: the coefficients plus the measured model's shape, for the record."""
    mc = model_config
    with torch.device("meta"):
        num_params = sum(p.numel() for p in LlamaModel(mc).parameters())
    coefficients: dict[str, Any] = dict(result.coefficients)  # the float fields FITTED_TERMS name
    return HardwareConfig(
        name="cpu_measured",
        description=description,
        kind="fitted",
        num_params=float(num_params),
        num_layers=mc.num_layers,
        hidden_size=mc.hidden_size,
        num_heads=mc.num_heads,
        num_kv_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        bytes_per_param=float(torch.empty((), dtype=mc.torch_dtype).element_size()),
        kv_bytes_per_element=float(torch.empty((), dtype=mc.torch_dtype).element_size()),
        fit_cache_kv_tokens=result.cache_kv_tokens,
        charge_host_time=True,  # on this CPU the scheduler runs serially with the model
        **coefficients,
    )


def report_rows(measurements: list[Measurement], result: Fit) -> list[dict[str, Any]]:
    """One row per grid point: its shape, measured median, prediction and relative error."""
    rows = []
    for m, pred in zip(measurements, result.predicted_s):
        rows.append(
            {
                **asdict(m.point),
                **{f"step_{k}": v for k, v in m.shape._asdict().items()},
                "measured_s": m.median_s,
                "predicted_s": pred,
                "rel_error": (pred - m.median_s) / m.median_s,
                "times_s": list(m.times_s),
            }
        )
    return rows
