"""Which workloads a client runs as SGLang frontend programs, sent as one batch.

The few-shot and agent shapes are the SGLang frontend language's programs in the RadixAttention
benchmarks (run through `run_batch`); a client releasing several of them at the same instant
submits them together (`Engine.submit_batch`), so SGLang's front stage can precache their
common prefix (engines/frontend.py). Every other workload is sent request by request.
"""

from __future__ import annotations

PROGRAM_WORKLOADS = frozenset({"fewshot", "agent"})


def runs_as_program(workload_name: str) -> bool:
    return workload_name in PROGRAM_WORKLOADS
