"""The run summary as a typed record, serialised to summary.json with vLLM's/SGLang's field names.

`RunSummary` holds what `harness.metrics.summarize` computes from a measured window's request
table (counts, throughputs, latency statistics, prefix-cache figures) plus `facts`: what the
pipeline knows beside the table (status, engine counters, bounds, warm-up; harness/run/pipeline.py
`RunFacts`). `as_dict()` is the flat JSON object every result file and reader uses, in the same
field order as before the record existed, so result files stay compatible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RunContext:
    """What identifies a run; copied onto every row of its request table."""

    workload: str
    workload_version: int
    engine: str
    policy: str
    block_size: int
    seed: int
    run_id: str


def percentile_name(p: float) -> str:
    """vLLM's field prefix: p99 for 99 or 99.0, p99.9 for 99.9."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


@dataclass(frozen=True)
class LatencyStats:
    """mean/median/population std and percentiles of one latency, in ms."""

    name: str  # ttft_ms, tpot_ms, itl_ms, e2el_ms, queue_delay_ms
    mean: float
    median: float
    std: float
    percentiles: tuple[tuple[float, float], ...]  # (p, value), ascending p

    def fields(self) -> dict[str, float]:
        out = {f"mean_{self.name}": self.mean, f"median_{self.name}": self.median}
        out[f"std_{self.name}"] = self.std
        out.update({f"{percentile_name(p)}_{self.name}": v for p, v in self.percentiles})
        return out


@dataclass(frozen=True)
class Throughput:
    """vLLM bench serve's counts and rates over the measured window (`duration` seconds)."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float | None
    request_goodput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    max_output_tokens_per_s: float | None
    max_concurrent_requests: int  # vLLM's per-second count (metrics._peaks)
    max_overlapping_requests: int  # the true peak of requests in flight at one instant


@dataclass(frozen=True)
class SglangRates:
    """SGLang bench_serving's names for the same window."""

    input_throughput: float | None
    total_throughput: float | None
    concurrency: float | None


@dataclass(frozen=True)
class CacheFigures:
    """Measured reuse (docs/benchmarking.md §5.1) and what preemption recomputed; the reuse split
    by tier (docs/tiers.md §4): device, host and storage shares of the prompt tokens (host and
    storage 0 without their tier)."""

    prompt_tokens_cached: int
    hit_rate: float | None
    recomputed_tokens: int
    num_preemptions: int
    prompt_tokens_cached_host: int = 0
    device_hit_rate: float | None = None
    host_hit_rate: float | None = None
    prompt_tokens_cached_storage: int = 0
    storage_hit_rate: float | None = None


@dataclass(frozen=True)
class RunSummary:
    throughput: Throughput
    latencies: tuple[LatencyStats, ...]  # ttft, tpot, itl, e2el, queue_delay
    max_itl_ms: float
    sglang: SglangRates
    cache: CacheFigures
    context: RunContext | None = None
    facts: Mapping[str, object] = field(default_factory=dict)  # merged last, wins

    def latency(self, name: str) -> LatencyStats:
        return next(s for s in self.latencies if s.name == name)

    def as_dict(self) -> dict[str, object]:
        """The flat summary.json object (not yet JSON-safe: see metrics.json_safe)."""
        out: dict[str, object] = {}
        if self.context is not None:
            out.update(asdict(self.context), backend=self.context.engine)
        out.update(asdict(self.throughput))
        for stats in self.latencies:
            out.update(stats.fields())
            if stats.name == "itl_ms":
                out["max_itl_ms"] = self.max_itl_ms
        out.update(asdict(self.sglang))
        e2el = self.latency("e2el_ms").fields()
        out.update({k.replace("_e2el_ms", "_e2e_latency_ms"): v for k, v in e2el.items()})
        out.update(asdict(self.cache))
        out.update(self.facts)
        return out
