"""The advice grid: which cells (design and settings) run under which arrival patterns.

A cell is one design, scheduler, page/block size and order at one KV capacity; a pattern is how
the requests arrive: the traffic's own times, or one burst and Poisson at fractions of the
throughput that burst reached. Seeds are given where the result is random (Poisson arrivals);
a burst and a trace replay are deterministic on the simulated executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.claims.arms import APC, RADIX
from harness.claims.tree_reuse import MAIN_FRACTION, RATE_FRACTIONS_FULL, SCHEDULERS
from harness.report.decomposition import cell_arm

VLLM, SGLANG = SCHEDULERS
# Sizes each design's upstream accepts: vLLM aligns its block size to the attention backend's
# kernel block size (vllm/config/attention.py, v0.33; FlashAttention takes multiples of 16), so
# block 1 is not a vLLM setting; SGLang 0.5.23 takes any `--page-size`.
LEGAL_SIZES = {APC: (16, 32), RADIX: (1, 16, 32)}
SEEDS_FULL = (0, 1, 2)  # claims.strength.MIN_SEEDS: fewer give no useful interval
USER, FIT = "your capacity", "working set fits"


@dataclass(frozen=True)
class Cell:
    """One design and its settings; `role` says what the grid runs it for."""

    cache: str
    scheduler: str
    block_size: int
    policy: str = "fcfs"
    capacity: str = USER
    role: str = "shipped"  # shipped | square | size | order

    @property
    def name(self) -> str:
        """The report's arm name (decomposition.cell_arm) with its settings: `radix-p16-vllm`."""
        arm = cell_arm(self.cache, self.scheduler)
        unit = "b" if self.cache == APC else "p"
        size = "" if self.block_size == _shipped_size(self.cache) else f"-{unit}{self.block_size}"
        if size:
            head, _, tail = arm.partition("-")
            arm = f"{head}{size}" + (f"-{tail}" if tail else "")
        order = "" if self.policy == "fcfs" else f"-{self.policy}"
        fit = "-fit" if self.capacity == FIT else ""
        return f"{arm}{order}{fit}"

    @property
    def label(self) -> str:
        """For a reader: `radix page 16 + SGLang scheduler`."""
        unit = "block" if self.cache == APC else "page"
        order = "" if self.policy == "fcfs" else f", {self.policy} order"
        return f"{self.cache} {unit} {self.block_size} + {self.scheduler} scheduler{order}"

    def bounds(self, ceilings: bool) -> tuple[str, ...]:
        """The ceilings ignore timing: they come from the shipped pairings' runs of the first
        pattern; every other run skips the LRU and Belady replays at capacity (they cost as much
        as the run) and the ideal at granularities the advice does not read."""
        if ceilings and self.role == "shipped":
            return ()
        return (
            "bounds.capped=false",
            "bounds.granularities=[]",
            "bounds.include_engine_granularity=false",
        )

    def overrides(self, capacity_tokens: int, ceilings: bool) -> tuple[str, ...]:
        preset = (
            self.cache
            if self.scheduler == _upstream(self.cache)
            else f"{self.cache}_{self.scheduler}"
        )
        return (
            f"engine={preset}",
            f"engine.block_size={self.block_size}",
            f"engine.policy={self.policy}",
            f"engine.kv_capacity_tokens={capacity_tokens}",
            *self.bounds(ceilings),
        )


@dataclass(frozen=True)
class Pattern:
    """How the requests arrive: `trace`, `burst`, or `poisson` at `fraction` of the burst's rate."""

    mode: str
    fraction: float | None = None
    seeds: tuple[int, ...] = (0,)

    @property
    def name(self) -> str:
        return self.mode if self.fraction is None else f"poisson-{self.fraction:g}"


def _upstream(cache: str) -> str:
    return VLLM if cache == APC else SGLANG


def _shipped_size(cache: str) -> int:
    return 16 if cache == APC else 1


def shipped() -> tuple[Cell, Cell]:
    return Cell(APC, VLLM, 16), Cell(RADIX, SGLANG, 1)


def patterns(has_times: bool, quick: bool) -> tuple[Pattern, ...]:
    """The traffic's own times when it has them; else one burst and Poisson below saturation."""
    if has_times:
        return (Pattern("trace"),)
    fractions = (MAIN_FRACTION,) if quick else RATE_FRACTIONS_FULL
    seeds = (0,) if quick else SEEDS_FULL
    return (Pattern("burst"), *(Pattern("poisson", f, seeds) for f in fractions))


def cells(quick: bool, capacity_fits: bool) -> tuple[Cell, ...]:
    """Shipped pairings, the 2 x 2 square at page 16 plus page 1 under both schedulers, the other
    legal sizes, SGLang's cache-aware order, and the shipped pairings where the working set fits."""
    apc, radix = shipped()
    square = (
        Cell(APC, SGLANG, 16, role="square"),
        Cell(RADIX, VLLM, 16, role="square"),
        Cell(RADIX, SGLANG, 16, role="square"),
        Cell(RADIX, VLLM, 1, role="square"),
    )
    sizes = tuple(
        Cell(c, _upstream(c), b, role="size")
        for c in (APC, RADIX)
        for b in LEGAL_SIZES[c]
        if b != _shipped_size(c) and not (c == RADIX and b == 16)  # radix p16 is in the square
    )
    order = (Cell(RADIX, SGLANG, 1, policy="lpm", role="order"),)
    fit = (
        ()
        if capacity_fits
        else (Cell(APC, VLLM, 16, capacity=FIT), Cell(RADIX, SGLANG, 1, capacity=FIT))
    )
    if quick:  # the square alone: the answer and its causes, no eviction or size effects
        return (apc, radix, *square)
    return (apc, radix, *square, *sizes, *order, *fit)


def seeds_for(cell: Cell, pattern: Pattern) -> tuple[int, ...]:
    """Every seed for the shipped pairings (the verdict's cells); seed 0 for the others."""
    return pattern.seeds if cell.role == "shipped" and cell.capacity == USER else pattern.seeds[:1]


def round_up(tokens: int, multiple: int = 32) -> int:
    """Whole pages of every legal size (32 is a multiple of 1 and 16)."""
    return -(-tokens // multiple) * multiple
