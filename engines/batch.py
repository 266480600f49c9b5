"""The batch loop: run a list of child requests to completion on the engine's incremental interface.

Each request is released at its own `arrival_s` on the run clock, with no cap and no dependencies:
what engine-level tests, micro-benchmarks and scripts need. Benchmarks go through the client layer
(harness/client/), which adds concurrency caps and conversation turns.
"""

from __future__ import annotations

import heapq
import math

from engines.engine import Engine
from engines.records import RequestRecord
from engines.request import GenerationRequest


def run_batch(engine: Engine, requests: list[GenerationRequest]) -> list[RequestRecord]:
    """Every request released at its arrival_s; returns the records in finish order."""
    engine.check_fits(requests)
    engine.restart()
    ready = [(r.arrival_s, i) for i, r in enumerate(requests)]
    heapq.heapify(ready)
    clock = engine.clock
    while ready or engine.has_work:
        while ready and ready[0][0] <= clock.now():
            t_s, i = heapq.heappop(ready)
            engine.add_request(requests[i], t_s)
        next_s = ready[0][0] if ready else math.inf
        if not engine.has_work:
            engine.idle()
            clock.wait_until(next_s)
            continue
        if not engine.step(next_s).progressed and next_s < math.inf:
            clock.wait_until(next_s)
    engine.idle()
    return engine.records
