"""`python -m harness.claims.zero_hit_worker OVERRIDES_JSON SEED...`: claim 1's paired on/off runs.

For each seed, every (design, caching on/off) arm of harness.run.overhead, interleaved, on the
given overrides; prints one JSON row per run (engine, cache_on, seed and the measured CPU and
bookkeeping times). Claim 1 spreads its seeds over several fresh processes, so the interval of
the CPU time caching adds carries the spread between invocations, not only within one.
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


def pairs(extra: list[str], seeds: list[int]) -> list[dict]:
    configs = {(e, on): config(e, on, extra) for e, on in overhead.ARMS}
    return [
        {"engine": e, "cache_on": on, "seed": seed, **overhead.measure_arm(cfg, seed)}
        for seed in seeds
        for (e, on), cfg in configs.items()
    ]


if __name__ == "__main__":
    rows = pairs(json.loads(sys.argv[1]), [int(s) for s in sys.argv[2:]])
    print(json.dumps(rows, default=float))
