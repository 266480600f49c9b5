"""Three hand-made request records with known latencies (a, b, c), shared by the metrics tests."""

from __future__ import annotations

from engines.records import RequestRecord
from harness.metrics.summary import RunContext
from workloads.request import Request

CTX = RunContext("toy", 1, "apc", "fcfs", 16, 0, "run-0")


def record(
    rid,
    tokens_s,
    arrival_s,
    scheduled_s,
    prompt,
    cached,
    parent=None,
    sample=0,
    recomputed=0,
    preempt=0,
):
    return RequestRecord(
        request_id=rid,
        parent_id=parent or rid,
        sample_index=sample,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=len(tokens_s),
        recomputed_tokens=recomputed,
        num_preemptions=preempt,
        arrival_s=arrival_s,
        scheduled_s=scheduled_s,
        first_token_s=tokens_s[0],
        finish_s=tokens_s[-1],
        token_times_s=tuple(tokens_s),
        output_ids=tuple(range(len(tokens_s))),
    )


# a: 4 tokens, TTFT 250, E2EL 1000, TPOT 750/3 = 250, ITL 125 250 375, queue 125
# b: 1 token,  TTFT 250, E2EL 250, no TPOT, no ITL
# c: 2 tokens, TTFT 500, E2EL 625, TPOT 125, ITL 125, preempted once with 5 tokens recomputed
RECORDS = [
    record("a", [0.25, 0.375, 0.625, 1.0], 0.0, 0.125, prompt=100, cached=64),
    record("b", [0.75], 0.5, 0.5, prompt=50, cached=0),
    record("c", [1.5, 1.625], 1.0, 1.25, prompt=30, cached=16, recomputed=5, preempt=1),
]


REQUESTS = {
    "a": Request("a", tuple(range(100)), arrival_s=0.0, session_id="s0", salt="tenant"),
    "b": Request("b", tuple(range(50)), arrival_s=0.5, shared_prefix_len=7),
    "c": Request("c", tuple(range(30)), arrival_s=1.0, session_id="s0", turn=1),
}
