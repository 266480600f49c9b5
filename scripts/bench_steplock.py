"""The step-locked twin's CPU cost per step against the pool's size (docs/performance.md §6).

Replays the recorded vLLM-CPU runs of tests/data/steplock (16 users x 3 turns at once) through
the twin (harness/live_server/steplock.py) with the apc pool at each size, and prints per size
the median CPU time of a whole replay divided by its engine steps, the trial steps it took and
their median CPU cost each, and the most blocks one trial's journal had to restore. Above 129
blocks nothing is evicted, so the twin's stream no longer equals the recorded one: the pairing
still runs every step and trial, which is what this times.
Usage: python scripts/bench_steplock.py [--repeats N] [--blocks 129,2048,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.build import build_engine  # noqa: E402
from engines.cache.apc.block_pool import BlockPool  # noqa: E402
from engines.config import EngineConfig  # noqa: E402
from engines.engine import Engine  # noqa: E402
from harness.live_server import steplock  # noqa: E402
from harness.live_server.kv_events import KvBatch  # noqa: E402
from harness.live_server.twin import _Context, twin_hardware  # noqa: E402
from workloads.request import Request  # noqa: E402

DATA = ROOT / "tests" / "data" / "steplock"
SIZES = (129, 2048, 32768, 131072)


def load(path: Path) -> tuple[dict, list[steplock.Arrival], list[KvBatch]]:
    with gzip.open(path, "rt") as f:
        case = json.load(f)
    arrivals = [
        steplock.Arrival(
            Request(r["request_id"], tuple(r["prompt_ids"]), tuple(r["output_ids"]), r["after"]),
            r["send_wall_s"],
            r["end_wall_s"],
            tuple(r["token_wall_s"]),
        )
        for r in case["requests"]
    ]
    return case, arrivals, [KvBatch.from_row(row) for row in case["kv_batches"]]


class Meter:
    """Times each trial and keeps the largest journal a rollback restored."""

    def __init__(self) -> None:
        self.trial_s: list[float] = []
        self.max_touched = 0
        self._trial = steplock._trial
        self._rollback = BlockPool.rollback_journal

    def install(self) -> None:
        meter = self

        def timed(engine: Engine, submit: list[Request]) -> tuple[frozenset, frozenset] | None:
            t0 = time.process_time()
            try:
                return meter._trial(engine, submit)
            finally:
                meter.trial_s.append(time.process_time() - t0)

        def rollback(pool: BlockPool) -> None:
            assert pool.journal is not None
            meter.max_touched = max(meter.max_touched, pool.journal.blocks_touched)
            meter._rollback(pool)

        steplock._trial = timed
        BlockPool.rollback_journal = rollback  # type: ignore[method-assign,assignment]


def replay_once(case: dict, arrivals, batches, blocks: int) -> tuple[float, int]:
    engine_cfg = dict(
        case["engine"], kv_capacity_tokens=(blocks - 1) * case["engine"]["block_size"]
    )
    cfg = dataclasses.replace(EngineConfig(), **engine_cfg, decode_runs=False)
    engine = build_engine(
        cfg,
        _Context(case["server"]["max_model_len"]),
        executor="simulated",
        hardware=twin_hardware(None),
    )
    t0 = time.process_time()
    run = steplock.replay(engine, arrivals, batches, cfg.block_size)
    return time.process_time() - t0, run.steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--blocks", default=",".join(map(str, SIZES)))
    args = parser.parse_args()
    cases = [load(p) for p in sorted(DATA.glob("*.json.gz"))]
    meter = Meter()
    meter.install()
    print(
        "| blocks | engine steps | trials | ms CPU / step | ms CPU / trial | max blocks restored |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for blocks in (int(b) for b in args.blocks.split(",")):
        per_step, steps_total = [], 0
        meter.trial_s, meter.max_touched = [], 0
        for _ in range(args.repeats):
            cpu, steps = 0.0, 0
            for case, arrivals, batches in cases:
                c, s = replay_once(case, arrivals, batches, blocks)
                cpu, steps = cpu + c, steps + s
            per_step.append(cpu / steps)
            steps_total = steps
        trials = len(meter.trial_s) // args.repeats
        print(
            f"| {blocks:,} | {steps_total} | {trials} | {statistics.median(per_step) * 1e3:.3f} "
            f"| {statistics.median(meter.trial_s) * 1e3:.3f} | {meter.max_touched} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
