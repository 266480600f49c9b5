"""`python -m harness.claims.zero_hit_worker JOBS_JSON`: claim 1's paired on/off runs.

JOBS_JSON is a list of [label, overrides, seeds, timings]. For each job and seed, every (design,
caching on/off) arm of harness.run.overhead runs `timings` times, the arms interleaved and their
order reversed on every other timing (ABBA), and the arm's fastest timing is kept; prints one JSON
list of rows (label, engine, cache_on, seed and the measured CPU and bookkeeping times). Claim 1
spreads its seeds over several fresh processes, so the interval of the CPU time caching adds
carries the spread between invocations, not only within one.
"""

from __future__ import annotations

import json
import sys

from harness.claims.experiment import PLAIN_LOOP, plain_loop_missing
from harness.config.schema import RunConfig
from harness.run import overhead


def config(engine: str, cache_on: bool, extra: list[str]) -> RunConfig:
    """harness.run.overhead's arm in the claims' event loop (harness/claims/experiment.py)."""
    cfg = overhead.config(engine, cache_on, extra)
    if plain_loop_missing(cfg, extra):
        return overhead.config(engine, cache_on, [*extra, PLAIN_LOOP])
    return cfg


def pairs(extra: list[str], seeds: list[int], timings: int = 1) -> list[dict]:
    """One row per seed and arm. With `timings` > 1 the row kept is the arm's lowest process CPU
    time, as timeit keeps its fastest repeat: another job on this shared box only ever adds CPU
    time to a run (a cache or a core shared), so the minimum is the least disturbed measurement,
    and an on/off difference no longer swings with a burst that fell on one arm of a pair."""
    configs = {(e, on): config(e, on, extra) for e, on in overhead.ARMS}
    rows = []
    for seed in seeds:
        timed: dict[tuple[str, bool], list[dict]] = {arm: [] for arm in configs}
        for t in range(timings):
            for arm in list(configs) if t % 2 == 0 else list(configs)[::-1]:
                timed[arm].append(overhead.measure_arm(configs[arm], seed))
        for (e, on), runs in timed.items():
            fastest = min(runs, key=lambda r: r["cpu_s"])
            rows.append({"engine": e, "cache_on": on, "seed": seed, **fastest})
    return rows


def run_jobs(jobs: list[tuple[str, list[str], list[int], int]]) -> list[dict]:
    """Every job's rows, each labelled with its job's label."""
    return [
        {"label": label, **row}
        for label, extra, seeds, timings in jobs
        for row in pairs(extra, seeds, timings)
    ]


if __name__ == "__main__":
    print(json.dumps(run_jobs(json.loads(sys.argv[1])), default=float))
