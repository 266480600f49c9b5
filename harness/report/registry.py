"""The report's registry: every figure by name, in drawing order (the one place they are listed).

A figure is a function `(Inputs) -> list[str]` (the stems it wrote) that raises `Skip` when its
runs are absent; `harness.report.build` draws them in this order.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.report import (
    decomposition,
    plots,
    plots_fleet,
    plots_load,
    plots_server,
    plots_sim,
)
from harness.report.plots import Inputs

# registry: every figure
FIGURES: dict[str, Callable[[Inputs], list[str]]] = {
    "ttft_cdf": plots.ttft_cdf,
    "latency_throughput": plots.latency_throughput,
    "hit_rate": plots.hit_rate,
    "capacity": plots.capacity,
    "overhead": plots.overhead,
    "bookkeeping": plots.bookkeeping,
    "metric_vs_load": plots_load.metric_vs_load,
    "speedup": plots_load.speedup,
    "ttft_hit_miss": plots_load.ttft_hit_miss,
    "server_twin": plots_server.server_twin,
    "trace_capacity": plots_sim.trace_capacity,
    "projected_overhead": plots_sim.projected_overhead,
    "decomposition": decomposition.decomposition,
    "fleet_routers": plots_fleet.fleet_routers,
}
