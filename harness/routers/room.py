"""How many worker processes this machine can hold: a fleet of real processes is refused, in one
line naming the flag, before anything starts when its estimated memory exceeds what is available
now (MemAvailable, or PREFIXBENCH_MEMORY_LIMIT: harness/config/footprint.py)."""

from __future__ import annotations

from harness.config.errors import BadInput
from harness.config.footprint import GIB, LIMIT_ENV, memory_limit_bytes

# Resident memory of one worker at rest, measured on this machine (2026-12-06, VmRSS after
# /health answered): a built-in server (python -m harness.builtin_server model=smollm2-rand, the
# interpreter, torch, the model and its KV pool) and a vLLM-CPU server (docs/fleet.md §5).
BUILTIN_WORKER_BYTES = 768 * 2**20  # measured 750 MiB
VLLM_CPU_WORKER_BYTES = 4 * GIB
ROUTER_BYTES = 200 * 2**20  # sglang-router or vllm-router, and this process's client


def check_room(flag: str, workers: int, per_worker_bytes: int) -> None:
    """Raise BadInput naming `flag` when `workers` processes of `per_worker_bytes` each (plus the
    router) would not fit in the memory available now."""
    free = memory_limit_bytes()
    need = workers * per_worker_bytes + ROUTER_BYTES
    if free is not None and need > free:
        most = max((free - ROUTER_BYTES) // per_worker_bytes, 0)
        raise BadInput(
            f"{flag} {workers}: {workers} workers need an estimated {need / GIB:.1f} GiB "
            f"({per_worker_bytes / GIB:.2f} GiB each, plus the router) but {free / GIB:.1f} GiB "
            f"are available, room for {most} ({LIMIT_ENV} sets the limit)"
        )
