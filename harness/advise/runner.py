"""The grid's runs through the run pipeline, one run directory each under the advice folder.

Each run is composed and checked as `python -m harness` would compose it (harness.run.compose),
claimed as its own directory and run in this process (harness.run.pipeline), so every run of the
advice can be read back by `python -m harness.report` like any other. A cell whose settings are
not legal here (a capacity that is not a whole number of its pages) is recorded as skipped.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.advise.grid import FIT, Cell, Pattern, cells, patterns, seeds_for, shipped
from harness.advise.traffic import Traffic
from harness.claims import keys
from harness.config.errors import BAD_INPUT, config_errors, describe
from harness.run.compose import compose, start, write_manifest
from harness.run.pipeline import run
from harness.run.targets import target_for
from workloads.progress import progress

METRICS = (keys.HIT_RATE, keys.TTFT_P50, keys.TTFT_P99, keys.THROUGHPUT, "request_throughput")
CEILINGS = (
    "ideal_hit_rate",
    "ideal_hit_rate_token",
    "belady_hit_rate",
    "theoretical_hit_rate_capped",
)
FACTS = (keys.EVICTIONS, keys.PREEMPTIONS, "num_prompts", "duration")


@dataclass(frozen=True)
class Grid:
    """Every run of the advice as one row (cell, pattern, seed, metrics), and the skipped cells."""

    runs: pd.DataFrame
    skipped: dict[str, str]  # cell name -> why
    rates: dict[str, float]  # pattern name -> req/s (Poisson patterns)

    def where(self, pattern: str) -> str:
        """A pattern for a reader: `one burst`, `Poisson 7.0 req/s`, `the trace's own times`."""
        if pattern in self.rates:
            return f"Poisson {self.rates[pattern]:.1f} req/s"
        return "one burst" if pattern == "burst" else "the traffic's own times"


def run_grid(traffic: Traffic, out: Path, quick: bool) -> Grid:
    """The burst (or trace) first: a Poisson pattern's rate is a fraction of its throughput."""
    grid_cells = cells(quick, traffic.capacity_fits)
    pats = patterns(traffic.has_times, quick)
    total = sum(len(seeds_for(c, p)) for c in grid_cells for p in pats)
    bar = progress(None, "advice runs", "run", total=total)
    rows: list[dict] = []
    skipped: dict[str, str] = {}
    rates: dict[str, float] = {}
    try:
        for pattern in pats:
            load = _load(pattern, rates)
            for cell in grid_cells:
                for seed in seeds_for(cell, pattern):
                    bar.set_postfix_str(f"{pattern.name} {cell.name} seed {seed}")
                    first = pattern == pats[0] and seed == pattern.seeds[0]
                    row = _run_cell(traffic, out, cell, pattern, (seed, first), load, skipped)
                    if row is not None:
                        rows.append(row)
                    bar.update(1)
            if pattern.mode == "burst":
                burst = [r for r in rows if r["cell"] == shipped()[0].name]
                rates["burst"] = float(burst[0]["request_throughput"])
    finally:
        bar.close()
    return Grid(pd.DataFrame(rows), skipped, {p.name: _rate(p, rates) for p in pats if p.fraction})


def _rate(pattern: Pattern, rates: dict[str, float]) -> float:
    assert pattern.fraction is not None
    return pattern.fraction * rates["burst"]


def _load(pattern: Pattern, rates: dict[str, float]) -> tuple[str, ...]:
    if pattern.mode == "poisson":
        return ("load.mode=poisson", f"load.rate={_rate(pattern, rates):.6g}")
    return (f"load.mode={pattern.mode}",)


def _run_cell(
    traffic: Traffic,
    out: Path,
    cell: Cell,
    pattern: Pattern,
    which: tuple[int, bool],
    load,
    skipped,
) -> dict | None:
    seed, ceilings = which  # the seed, and whether the run computes the ceilings
    capacity = traffic.working_set if cell.capacity == FIT else traffic.capacity
    overrides = [*traffic.base, *cell.overrides(capacity, ceilings), *load, f"seed={seed}"]
    try:
        composed = compose(overrides, job_name="advise")
    except (*BAD_INPUT, *config_errors()) as exc:  # e.g. a capacity that is no whole page count
        skipped[cell.name] = describe(exc)
        return None
    name = f"{pattern.name}/{cell.name}-seed{seed}"
    files, rows = start(out / "runs" / name, overwrite=False)
    write_manifest(files, composed)
    # The pipeline prints vLLM's result block; the advice prints its own answer.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        summary = run(composed.cfg, files, rows, target_for(composed.cfg)).summary
    if summary.get("status") != "ok":
        raise RuntimeError(f"advice run {name}: {summary.get('error')}")
    return {
        "pattern": pattern.name,
        "mode": pattern.mode,
        "fraction": pattern.fraction,
        "cell": cell.name,
        "label": cell.label,
        "cache": cell.cache,
        "scheduler": cell.scheduler,
        "block_size": cell.block_size,
        "policy": cell.policy,
        "capacity": cell.capacity,
        "capacity_tokens": capacity,
        "role": cell.role,
        "seed": seed,
        "executor": composed.cfg.executor,
        **{k: summary.get(k) for k in (*METRICS, *CEILINGS, *FACTS)},
        "run_dir": str(files.path),
    }
