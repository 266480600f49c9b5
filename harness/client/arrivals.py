"""Arrival processes (docs/benchmarking.md §7): when a client sends each request.

Poisson/gamma follows `vllm bench serve`: gaps ~ Gamma(burstiness, 1/(rate * burstiness)),
cumulated, then rescaled so the last send is at N / rate; seeded from the run seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from engines.registry import Registry
from harness.client.config import LoadConfig
from harness.config.errors import BadInput
from workloads.request import Request

# registry: every arrival process (load.mode -> send times of the requests)
ARRIVALS: Registry = Registry("load.mode")


@ARRIVALS.register("burst")
def _burst(requests: list[Request], load: LoadConfig, seed: int) -> list[float]:
    return [0.0] * len(requests)


@ARRIVALS.register("trace")
def _trace(requests: list[Request], load: LoadConfig, seed: int) -> list[float]:
    return [r.arrival_s * load.slowdown for r in requests]


@ARRIVALS.register("poisson")
def _poisson(requests: list[Request], load: LoadConfig, seed: int) -> list[float]:
    if load.rate is None or load.rate <= 0:
        raise BadInput(
            f"load.rate must be a positive number of requests/s for load.mode=poisson, got {load.rate}"
        )
    if load.burstiness <= 0:
        raise BadInput(f"load.burstiness must be positive, got {load.burstiness}")
    n = len(requests)
    rng = np.random.default_rng([seed, 0x10AD])
    gaps = rng.gamma(shape=load.burstiness, scale=1.0 / (load.rate * load.burstiness), size=n)
    times = np.cumsum(gaps)
    if n and times[-1] > 0:
        times *= (n / load.rate) / times[-1]
    return [float(t) for t in times]


def resolve_mode(requests: list[Request], load: LoadConfig) -> str:
    """`auto` means trace timestamps when the workload carries them, else an offline burst."""
    if load.mode != "auto":
        return load.mode
    return "trace" if any(r.arrival_s > 0 for r in requests) else "burst"


@ARRIVALS.register("auto")
def _auto(requests: list[Request], load: LoadConfig, seed: int) -> list[float]:
    return ARRIVALS.get(resolve_mode(requests, load))(requests, load, seed)


def with_arrivals(requests: list[Request], load: LoadConfig, seed: int) -> list[Request]:
    """Requests with arrival_s set by the load mode (dependent turns keep their `after`)."""
    times = ARRIVALS.get(load.mode)(requests, load, seed)
    return [dataclasses.replace(r, arrival_s=t) for r, t in zip(requests, times)]
