"""The step-locked twin against a server whose KV events lie (issue 48, item 2).

A recorded vLLM-CPU run (tests/data/steplock) is replayed with its event stream reordered, cut,
duplicated, thinned or swapped for another server's. Promised: no exception; never `identical`
(the block-by-block agreement) unless it was; what happened recorded, in the replay's notes or
the comparison's first difference; and `twin.predict`, the run's path, falls back to the
predicted timeline and says why wherever the stream is not one server's steps in order.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from collections.abc import Callable

import pytest

from engines.config import EngineConfig
from harness.live_server import steplock
from harness.live_server.driver import SCRIPTED, Sent
from harness.live_server.http_client import ChoiceOut, Reply
from harness.live_server.kv_events import KvBatch, order_problem
from harness.live_server.record import _timeline_note
from harness.live_server.twin import PREDICTED, STEP_LOCKED, ServerFacts, predict
from tests.steplock_util import DATA, arrivals
from tests.unit.test_steplock_recorded import _replay

FLIP = 0x5A5A5A5A5A5A5A5A  # another server's hashes: the same shape, matching none of ours


@pytest.fixture(scope="module")
def case() -> dict:
    with gzip.open(DATA / "mt16-burst-a.json.gz", "rt") as f:
        return dict(json.load(f))


def _batches(case: dict) -> list[KvBatch]:
    return [KvBatch.from_row(row) for row in case["kv_batches"]]


def _foreign(b: KvBatch) -> KvBatch:
    return dataclasses.replace(
        b, stored=tuple(h ^ FLIP for h in b.stored), removed=tuple(h ^ FLIP for h in b.removed)
    )


def _shuffled(bs: list[KvBatch]) -> list[KvBatch]:
    out = list(bs)
    random.Random(7).shuffle(out)
    return out


Lie = Callable[[list[KvBatch]], list[KvBatch]]
# name -> (the lie, what the replay's notes must name; None: only the comparison can tell)
LIES: dict[str, tuple[Lie, str | None]] = {
    "two swapped": (lambda b: b[:3] + [b[4], b[3]] + b[5:], "skips"),
    "shuffled": (_shuffled, "sequence number"),
    "reversed": (lambda b: b[::-1], "goes back"),
    "one missing": (lambda b: b[:5] + b[6:], "skips"),
    "one duplicated": (lambda b: b[:6] + b[5:], "repeats"),
    "all duplicated": (lambda b: [x for x in b for _ in (0, 1)], "repeats"),
    "another server's": (lambda b: [_foreign(x) for x in b], "no request's own prompt block"),
    "empty": (lambda b: [], "no request's own prompt block"),
    "timestamps not times": (
        lambda b: [dataclasses.replace(x, ts=float("nan")) for x in b],
        "not a time",
    ),
    # renumbered or cut at an end: no sequence gap to see, so the comparison records it
    "first missing": (lambda b: b[1:], None),
    "truncated": (lambda b: b[: len(b) // 2], None),
    "one batch": (lambda b: b[:1], None),
    "one foreign batch": (lambda b: b[:5] + [_foreign(b[5])] + b[6:], None),
}


@pytest.mark.parametrize("name", LIES)
def test_a_lying_stream_never_crashes_nor_agrees(name, case):
    lie, named = LIES[name]
    batches = lie(_batches(case))
    run = _replay(case, batches)
    assert len(run.records) == len(case["requests"])  # every request still replayed
    comparison = steplock.compare(batches, run.twin_batches)
    assert comparison["identical"] is False
    assert comparison["first_difference"] is not None  # the distance, recorded
    if named is not None:
        assert any(named in note for note in run.notes), run.notes


def test_the_honest_stream_has_no_notes(case):
    run = _replay(case, _batches(case))
    assert run.notes == [] and order_problem(_batches(case)) is None


def _sent(case: dict) -> list[Sent]:
    """The recorded run as the client saw it (times on the server's wall clock: t0 = wall0 = 0)."""
    out = []
    for a in arrivals(case):
        output_ids = a.request.output_ids or ()
        choice = ChoiceOut(token_ids=list(output_ids), token_times_s=list(a.token_wall_s))
        reply = Reply("ok", 200, None, a.send_wall_s, a.end_wall_s, (choice,))
        prompt = tuple(a.request.prompt_ids)
        out.append(Sent(a.request, prompt, SCRIPTED, 0.0, reply, 0.0, 0.0))
    return out


def _predict(case: dict, batches: list[KvBatch]):
    e, s = case["engine"], case["server"]
    facts = ServerFacts(
        e["block_size"],
        e["kv_capacity_tokens"],
        e["max_num_seqs"],
        e["max_num_batched_tokens"],
        s["max_model_len"],
        e["async_scheduling"],
    )
    return predict(_sent(case), EngineConfig(), facts, False, None, batches)


def test_the_run_locks_onto_the_honest_stream(case):
    twin = _predict(case, _batches(case))
    assert twin.timeline == STEP_LOCKED
    assert twin.kv_comparison is not None and twin.kv_comparison["identical"]
    assert twin.predicted == case["cached_tokens"]


@pytest.mark.parametrize(
    "name, refused",
    [
        ("one duplicated", "repeats"),
        ("reversed", "goes back"),
        ("one missing", "skips"),
        ("another server's", "none of the 48 requests' own prompt blocks"),
        ("empty", "none of the 48 requests' own prompt blocks"),
    ],
)
def test_the_run_falls_back_to_the_predicted_timeline_and_says_why(case, name, refused):
    twin = _predict(case, LIES[name][0](_batches(case)))
    assert twin.timeline == PREDICTED
    assert twin.kv_comparison is None  # no block-by-block agreement claimed
    assert twin.steplock is not None and refused in twin.steplock["refused"]
    assert set(twin.predicted) == set(case["cached_tokens"])
    note = _timeline_note(twin)
    assert note is not None and note.startswith("KV events not used") and refused in note
