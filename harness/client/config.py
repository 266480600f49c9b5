"""The `load` config group: its record (`LoadConfig`, a field of RunConfig) and its checks. The
modes are the arrival processes registered in harness/client/arrivals.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.checks import require_int, require_number
from harness.config.errors import BadInput

MAX_RATE = 1e6  # requests/s
MAX_SLOWDOWN = 1e6
MAX_BURSTINESS = 1e3


@dataclass
class LoadConfig:
    """How requests are released (docs/benchmarking.md §7).

    auto: trace timestamps when the workload carries arrival times, else burst.
    burst: every request at t = 0.  poisson: vLLM's gamma gaps (burstiness 1 = Poisson) at `rate`
    req/s, rescaled so the last send is at N / rate.  trace: the workload's timestamps times
    `slowdown`.
    max_concurrency: at most this many requests in flight, as `vllm bench serve --max-concurrency`
    (a client-side semaphore: a request held back is sent, and timed, when a slot frees).
    """

    mode: str = "auto"  # auto | burst | poisson | trace
    rate: float | None = None
    burstiness: float = 1.0
    slowdown: float = 1.0
    max_concurrency: int | None = None  # None: no limit


def check_load(load: LoadConfig) -> None:
    """Raise BadInput naming the first bad field of `load` (before anything is generated)."""
    from harness.client.arrivals import ARRIVALS

    ARRIVALS.get(load.mode)  # unknown mode lists the valid ones
    if load.rate is not None:
        require_number("load.rate", load.rate, MAX_RATE)
    elif load.mode == "poisson":
        raise BadInput(
            "load.rate must be a positive number of requests/s for load.mode=poisson, got None"
        )
    require_number("load.burstiness", load.burstiness, MAX_BURSTINESS)
    require_number("load.slowdown", load.slowdown, MAX_SLOWDOWN)
    if load.max_concurrency is not None:
        require_int("load.max_concurrency", load.max_concurrency, 1, 1_000_000)
