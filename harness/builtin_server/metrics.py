"""`GET /metrics`: the engine's counters in Prometheus text format, under vLLM's metric names.

Names, types and units are vLLM 0.32's (vllm/v1/metrics/loggers.py `PrometheusStatLogger`), so
tools that scrape vLLM read this server unchanged: prefix-cache queries and hits in tokens,
prompt and generation tokens, running and waiting requests, KV usage as a fraction (1 = full),
and `vllm:cache_config_info` carrying the block size and block count; SGLang's names for the
hit, token and load figures too. A host tier (and a storage tier behind it) shows in vLLM's
KV-connector counters (`vllm:external_prefix_cache_{queries,hits}`), vLLM's per-source cached
tokens (`vllm:prompt_tokens_cached_by_source{source=...}`) and SGLang's
(`sglang:cached_tokens_total{cache_source=...}`; docs/tiers.md §4). Counters never go back: a
cache reset zeroes the cache's own statistics, so the engine thread keeps what came before.
Text exposition format 0.0.4, written here (a dozen lines; no client library needed).
"""

from __future__ import annotations

from dataclasses import dataclass

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class MetricsSnapshot:
    """The engine's state between two steps, taken on the engine thread."""

    prefix_cache_queries: int  # tokens, cumulative over resets
    prefix_cache_hits: int
    prompt_tokens: int
    generation_tokens: int
    prompt_tokens_cached: int
    preemptions: int
    requests_finished: int
    requests_running: int
    requests_waiting: int
    kv_cache_usage: float  # fraction of KV tokens that requests hold
    block_size: int
    num_blocks: int  # KV blocks including the reserved block 0 (vLLM's num_gpu_blocks)
    cache: str  # apc | radix
    scheduler: str  # vllm | sglang
    # Per finished request (upstream counts each request once): the tokens looked up past the
    # device hit and found in the host tier (vLLM's connector queries and hits; 0 without a
    # tier or under SGLang's scheduler), and the cached tokens by tier (SGLang's sources).
    external_queries: int = 0
    external_hits: int = 0
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0  # a storage tier's (not among cached_host)
    host_tier_tokens: int = 0  # the host tier's size (0: none)
    storage_tier: bool = False  # a storage tier behind the host tier


_COUNTERS = (
    ("vllm:prefix_cache_queries", "prefix_cache_queries", "Prefix cache queries, in tokens."),
    ("vllm:prefix_cache_hits", "prefix_cache_hits", "Prefix cache hits, in tokens."),
    ("vllm:prompt_tokens", "prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "generation_tokens", "Number of generation tokens processed."),
    ("vllm:prompt_tokens_cached", "prompt_tokens_cached", "Prompt tokens read from the cache."),
    ("vllm:num_preemptions", "preemptions", "Cumulative number of preemptions."),
    ("vllm:request_success", "requests_finished", "Count of successfully processed requests."),
    # vLLM 0.33 v1/metrics/loggers.py registers these whether or not a connector is configured
    (
        "vllm:external_prefix_cache_queries",
        "external_queries",
        "External prefix cache queries from KV connector, in tokens.",
    ),
    (
        "vllm:external_prefix_cache_hits",
        "external_hits",
        "External prefix cache hits from KV connector, in tokens.",
    ),
)
# SGLang 0.5's names for the same quantities (python/sglang/srt/metrics/collector.py), so a
# client that reads an SGLang server's counters (cached tokens over prompt tokens) reads these.
_SGLANG_COUNTERS = (
    ("sglang:prompt_tokens", "prompt_tokens", "Number of prefill tokens processed."),
    ("sglang:generation_tokens", "generation_tokens", "Number of generation tokens processed."),
)
_SGLANG_GAUGES = (
    ("sglang:num_running_reqs", "requests_running", "The number of running requests."),
    ("sglang:num_queue_reqs", "requests_waiting", "The number of requests in the waiting queue."),
    ("sglang:token_usage", "kv_cache_usage", "The token usage."),
)
_GAUGES = (
    ("vllm:num_requests_running", "requests_running", "Number of requests in model execution."),
    ("vllm:num_requests_waiting", "requests_waiting", "Number of requests waiting to be run."),
    ("vllm:kv_cache_usage_perc", "kv_cache_usage", "KV-cache usage. 1 means 100 percent usage."),
)


def render(snap: MetricsSnapshot, model_name: str) -> str:
    labels = f'{{engine="0",model_name="{_escape(model_name)}"}}'
    lines: list[str] = []
    for name, attr, doc in _COUNTERS:
        lines += _family(f"{name}_total", "counter", doc, labels, getattr(snap, attr))
    for name, attr, doc in _GAUGES:
        lines += _family(name, "gauge", doc, labels, getattr(snap, attr))
    lines += _cached_by_source(snap, model_name)
    if snap.host_tier_tokens:
        lines += _vllm_cached_by_source(snap, model_name)
    for name, attr, doc in _SGLANG_COUNTERS:
        lines += _family(f"{name}_total", "counter", doc, labels, getattr(snap, attr))
    for name, attr, doc in _SGLANG_GAUGES:
        lines += _family(name, "gauge", doc, labels, getattr(snap, attr))
    tier = f'host_tier_tokens="{snap.host_tier_tokens}",' if snap.host_tier_tokens else ""
    info = (
        f'{{block_size="{snap.block_size}",cache="{snap.cache}",engine="0",{tier}'
        f'num_gpu_blocks="{snap.num_blocks}",scheduler="{snap.scheduler}"}}'
    )
    lines += _family("vllm:cache_config_info", "gauge", "Information of the KV cache.", info, 1)
    return "\n".join(lines) + "\n"


def _cached_by_source(snap: MetricsSnapshot, model_name: str) -> list[str]:
    """SGLang 0.5.23's `sglang:cached_tokens_total` with its `cache_source` label
    (srt/observability/metrics_collector.py): device always, host with a tier, storage with a
    storage tier (SGLang's source only with a storage backend). SGLang's series appear at their
    first increment; these are there from the start, at 0."""
    name = "sglang:cached_tokens_total"
    sources = [("device", snap.cached_device)]
    if snap.host_tier_tokens:
        sources.append(("host", snap.cached_host))
    if snap.storage_tier:
        sources.append(("storage", snap.cached_storage))
    lines = [
        f"# HELP {name} Number of cached prompt tokens by source (device/host/storage).",
        f"# TYPE {name} counter",
    ]
    for source, value in sources:
        labels = f'{{cache_source="{source}",engine="0",model_name="{_escape(model_name)}"}}'
        lines.append(f"{name}{labels} {float(value)!r}")
    return lines


# vLLM 0.33's CacheHitSource values (v1/metrics/cache_hit_source.py), in its order; loggers.py
# creates a series for each at start-up.
_VLLM_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _vllm_cached_by_source(snap: MetricsSnapshot, model_name: str) -> list[str]:
    """vLLM 0.33's `vllm:prompt_tokens_cached_by_source` (v1/metrics/loggers.py): `device` is
    the prefix-cache hits, and the connector's hits are split by the tier that supplied them
    (`hits_by_source`): `host` the CPU tier, `disk` the file-system tier. Upstream's sum is the
    prefix-cache hits plus the connector's; under SGLang's scheduler there is no connector, so
    the host and disk series stay 0 as the external counters do."""
    name = "vllm:prompt_tokens_cached_by_source"
    connector = snap.scheduler == "vllm"
    values = {
        "device": snap.prefix_cache_hits,
        "host": snap.cached_host if connector else 0,
        "disk": snap.cached_storage if connector else 0,
    }
    lines = [
        f"# HELP {name}_total Prefix-cache hit tokens by the cache tier that supplied them.",
        f"# TYPE {name}_total counter",
    ]
    for source in _VLLM_SOURCES:
        labels = f'{{engine="0",model_name="{_escape(model_name)}",source="{source}"}}'
        lines.append(f"{name}_total{labels} {float(values.get(source, 0))!r}")
    return lines


def _family(name: str, kind: str, doc: str, labels: str, value: float) -> list[str]:
    return [f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{labels} {float(value)!r}"]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def parse(text: str) -> dict[str, float]:
    """Sample name (labels dropped) -> value summed over its label sets: what a test or a
    client reads back."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + float(value)
    return out
