"""The client layer and the engine's incremental interface, apart and together.

ReleaseQueue is pure bookkeeping (no clock): arrival order, the client-side concurrency cap with
the arrival taken when a slot frees, conversation turns released think_s after the previous one
finishes. The engine splits an API request through its front stage, reports a parent finished
only when every sample has, and aborts without leaking KV or leaving a record.
"""

from __future__ import annotations

import math

from engines.request import CompletionRequest
from harness.client.releases import ReleaseQueue
from tests.engine_util import make_engine
from workloads.request import Request


def _req(rid: str, arrival_s: float = 0.0, after: str | None = None, think_s: float = 0.0):
    return Request(
        rid, (1, 2, 3), output_ids=(4, 5), arrival_s=arrival_s, after=after, think_s=think_s
    )


def test_release_queue_sends_in_arrival_order_under_a_cap():
    queue = ReleaseQueue([_req("a", 0.0), _req("b", 0.0), _req("c", 1.0)], max_concurrency=1)
    assert [(r.request_id, t) for r, t in queue.due(0.0)] == [("a", 0.0)]
    assert queue.due(5.0) == [] and queue.next_release_s() == math.inf  # the cap is reached
    queue.finished("a", 2.5)
    # b was due at 0 but held back: it is sent, and its arrival taken, when a slot freed.
    assert [(r.request_id, t) for r, t in queue.due(2.5)] == [("b", 2.5)]
    queue.finished("b", 3.0)
    assert [(r.request_id, t) for r, t in queue.due(3.0)] == [("c", 3.0)]
    queue.finished("c", 4.0)
    assert not queue.pending and queue.in_flight == 0


def test_release_queue_releases_a_turn_after_the_previous_one_finishes():
    turns = [_req("t0"), _req("t1", arrival_s=0.0, after="t0", think_s=0.5)]
    queue = ReleaseQueue(turns)
    assert [r.request_id for r, _ in queue.due(0.0)] == ["t0"]
    assert not queue.pending  # t1 waits on a finish, not on the clock
    queue.finished("t0", 2.0)
    assert queue.next_release_s() == 2.5 and queue.due(2.4) == []
    assert [(r.request_id, t) for r, t in queue.due(2.5)] == [("t1", 2.5)]


def _run_until_idle(engine) -> list:
    outs = []
    while engine.has_work:
        outs.append(engine.step())
    engine.idle()
    return outs


def test_submit_fans_out_and_reports_the_parent_once_all_samples_finished():
    engine = make_engine("apc")
    engine.restart()
    scripts = ((7, 8, 9), (10, 11, 12), (13, 14, 15))
    req = CompletionRequest("p", tuple(range(1, 40)), 3, n=3, scripted_output_ids=scripts)
    assert engine.submit(req, 0.0) == ["0_p", "1_p", "2_p"]
    outs = _run_until_idle(engine)
    parents = [p for out in outs for p in out.finished_parents]
    assert parents == ["p"]
    assert sorted(r.request_id for r in engine.records) == ["0_p", "1_p", "2_p"]
    assert {r.output_ids for r in engine.records} == set(scripts)
    # the samples share the prompt through the cache: 32 of 39 tokens (two 16-token blocks)
    assert sorted(r.cached_tokens for r in engine.records) == [0, 32, 32]


def test_abort_frees_kv_and_leaves_no_record():
    engine = make_engine("radix")
    engine.restart()
    long = CompletionRequest("long", tuple(range(1, 30)), 50, scripted_output_ids=((3,) * 50,))
    waiting = CompletionRequest("w", tuple(range(100, 130)), 2, scripted_output_ids=((4, 5),))
    engine.submit(long, 0.0)
    out = engine.step()  # long's prefill
    assert out.progressed and out.tokens["long"]
    engine.submit(waiting, 0.0)
    assert engine.abort_request("w")  # never scheduled: dropped at once
    assert engine.abort_request("long")  # running: finishes at its next step
    assert not engine.abort_request("nobody")
    _run_until_idle(engine)
    assert engine.records == []
    assert engine.cache.usage().protected == 0
    engine.cache.check_integrity()
