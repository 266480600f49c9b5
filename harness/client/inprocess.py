"""The in-process driver: the client layer sending workload requests to the built-in engine.

The engine's own run clock is the client's clock, so a simulated run's arrivals, waits and
token times are all virtual, and a real run's are on the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engines.engine import Engine
from engines.records import RequestRecord
from engines.request import CompletionRequest
from harness.client.releases import ReleaseQueue
from workloads.request import Request

if TYPE_CHECKING:
    from harness.fleet.fleet import Fleet


def completion_request(req: Request, scripted: bool) -> CompletionRequest:
    """The API request a client sends for `req`: its prompt, n samples, their scripts."""
    scripts = None
    if scripted and req.output_ids is not None:
        if req.sample_output_ids:
            scripts = tuple(tuple(s) for s in req.sample_output_ids)
        else:
            scripts = (tuple(req.output_ids),) * req.n
    return CompletionRequest(
        request_id=req.request_id,
        prompt_ids=req.prompt_ids,  # shared, never copied (a trace holds ~1e8 tokens)
        max_new_tokens=req.output_len,
        n=req.n,
        scripted_output_ids=scripts,
        salt=req.salt,
        lora_id=req.lora_id,
    )


def drive(
    engine: Engine | Fleet,
    requests: list[Request],
    *,
    scripted: bool = True,
    max_concurrency: int | None = None,
    on_finish: Callable[[RequestRecord], None] | None = None,
    program_batch: bool = False,
) -> list[RequestRecord]:
    """Send `requests` on their schedule and step the engine (or a fleet of them, harness/fleet)
    until every one has finished.
    program_batch: requests released at the same instant go as one batch (`submit_batch`;
    harness/client/programs.py), otherwise one by one."""
    queue = ReleaseQueue(requests, max_concurrency)
    clock = engine.clock
    engine.restart()
    while queue.pending or engine.has_work:
        for group, arrival_s in _groups(queue.due(clock.now()), program_batch):
            batch = [completion_request(req, scripted) for req in group]
            if len(batch) > 1:
                engine.submit_batch(batch, arrival_s)
            else:
                engine.submit(batch[0], arrival_s)
        if not engine.has_work:
            engine.idle()
            clock.wait_until(queue.next_pending_s())
            continue
        out = engine.step(queue.next_release_s())
        if not out.progressed:
            if queue.next_release_s() < float("inf"):
                clock.wait_until(queue.next_release_s())
            continue
        if on_finish is not None:
            for record in out.finished:
                on_finish(record)
        for parent_id in out.finished_parents:
            queue.finished(parent_id, out.end_s)
    engine.idle()  # the run ended with nothing left: the engine idles until the next one
    return engine.records


def _groups(
    due: list[tuple[Request, float]], program_batch: bool
) -> list[tuple[list[Request], float]]:
    """Due requests as submissions: one each, or (program_batch) one per release instant."""
    if not program_batch:
        return [([req], t) for req, t in due]
    groups: list[tuple[list[Request], float]] = []
    for req, t in due:
        if groups and groups[-1][1] == t:
            groups[-1][0].append(req)
        else:
            groups.append(([req], t))
    return groups
