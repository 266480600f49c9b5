"""The step-locked twin on two recorded vLLM-CPU runs: exact, block by block and request by request.

Each file in tests/data/steplock is one run of test_real_server's closed-loop burst (16 users x 3
turns at once, vLLM-CPU 0.32, 129 blocks of 32 tokens): the token streams that were sent and
received, with their wall-clock times, the server's KV-event batches, and the cached tokens the
server reported per request. In both, a turn reached the engine after turns sent up to 7 ms later
than it; entering the twin in send order then put the running requests in another order than the
server's, and eviction later took other blocks (one turn 32 tokens off in run a, eight turns 256
tokens off in run b). The twin now takes the admission order from the batch that stored the
requests' blocks (harness/live_server/steplock.py). Replaying a recorded run needs no server, so
this pins what the live test can only sample.
"""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from engines.build import build_engine
from engines.config import EngineConfig
from harness.live_server import steplock
from harness.live_server.kv_events import KvBatch
from harness.live_server.twin import _Context, twin_hardware
from tests.steplock_util import DATA, arrivals

CASES = sorted(p.name.removesuffix(".json.gz") for p in DATA.glob("*.json.gz"))


def _replay(case: dict, batches: list[KvBatch]) -> steplock.StepLockedRun:
    cfg = dataclasses.replace(EngineConfig(), **case["engine"], decode_runs=False)
    engine = build_engine(
        cfg,
        _Context(case["server"]["max_model_len"]),
        executor="simulated",
        hardware=twin_hardware(None),
    )
    return steplock.replay(engine, arrivals(case), batches, cfg.block_size)


@pytest.mark.parametrize("name", CASES)
def test_the_twin_replays_a_recorded_burst_exactly(name):
    with gzip.open(DATA / f"{name}.json.gz", "rt") as f:
        case = json.load(f)
    batches = [KvBatch.from_row(row) for row in case["kv_batches"]]
    run = _replay(case, batches)
    comparison = steplock.compare(batches, run.twin_batches)
    assert comparison["identical"], comparison["first_difference"]
    assert run.anchored == len(case["requests"]) == 48
    predicted = {r.request_id: r.cached_tokens for r in run.records}
    assert predicted == case["cached_tokens"]


def test_the_recorded_runs_are_there():
    assert CASES == ["mt16-burst-a", "mt16-burst-b"]
