"""The built-in server's /metrics text with and without a host tier (harness/builtin_server/
metrics.py): vLLM's external prefix-cache counters always (at 0 without a tier, as vLLM
registers them), SGLang's cached tokens by `cache_source` (a host series only with a tier), the
tier's size on `vllm:cache_config_info`, vLLM's cached tokens by `source` with a tier; with a
storage tier, its `storage` and `disk` series; `parse` sums a name's label sets."""

from __future__ import annotations

import dataclasses

from harness.builtin_server.metrics import MetricsSnapshot, parse, render

BASE = MetricsSnapshot(
    prefix_cache_queries=900, prefix_cache_hits=300, prompt_tokens=900, generation_tokens=12,
    prompt_tokens_cached=300, preemptions=0, requests_finished=3, requests_running=0,
    requests_waiting=0, kv_cache_usage=0.0, block_size=16, num_blocks=41, cache="apc",
    scheduler="vllm", cached_device=300,
)  # fmt: skip


def test_without_a_tier_no_host_series_and_external_counters_at_zero():
    text = render(BASE, "tiny")
    assert (
        'sglang:cached_tokens_total{cache_source="device",engine="0",model_name="tiny"} 300.0'
        in (text)
    )
    assert 'cache_source="host"' not in text and "host_tier_tokens" not in text
    got = parse(text)
    assert got["vllm:external_prefix_cache_queries_total"] == 0
    assert got["vllm:external_prefix_cache_hits_total"] == 0


def test_with_a_tier_the_host_series_the_counters_and_the_size():
    snap = dataclasses.replace(
        BASE, external_queries=600, external_hits=288, cached_device=12, cached_host=288,
        prompt_tokens_cached=300, host_tier_tokens=4096,
    )  # fmt: skip
    text = render(snap, "tiny")
    assert 'sglang:cached_tokens_total{cache_source="host",engine="0",model_name="tiny"} 288.0' in (
        text
    )
    assert 'host_tier_tokens="4096"' in text
    got = parse(text)
    assert got["sglang:cached_tokens_total"] == 300  # device + host, summed over the labels
    assert got["vllm:external_prefix_cache_queries_total"] == 600
    assert got["vllm:external_prefix_cache_hits_total"] == 288


def _by(text: str, name: str, label: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line.rpartition(" ")
            out[labels.split(f'{label}="', 1)[1].split('"', 1)[0]] = float(value)
    return out


def test_vllm_cached_by_source_only_with_a_tier():
    assert "vllm:prompt_tokens_cached_by_source" not in render(BASE, "tiny")
    snap = dataclasses.replace(
        BASE, prefix_cache_hits=12, external_hits=288, cached_device=12, cached_host=288,
        host_tier_tokens=4096,
    )  # fmt: skip
    got = _by(render(snap, "tiny"), "vllm:prompt_tokens_cached_by_source_total", "source")
    assert got == {"device": 12, "host": 288, "p2p": 0, "disk": 0, "external_unspecified": 0}


def test_a_storage_tier_adds_its_source_in_both_engines_counters():
    # 300 cached: 12 on the device, 100 from the host tier, 188 from storage
    snap = dataclasses.replace(
        BASE, prefix_cache_hits=12, external_hits=288, cached_device=12, cached_host=100,
        cached_storage=188, host_tier_tokens=4096, storage_tier=True,
    )  # fmt: skip
    text = render(snap, "tiny")
    sglang = _by(text, "sglang:cached_tokens_total", "cache_source")
    assert sglang == {"device": 12, "host": 100, "storage": 188}
    vllm = _by(text, "vllm:prompt_tokens_cached_by_source_total", "source")
    assert (vllm["device"], vllm["host"], vllm["disk"]) == (12, 100, 188)
    assert sum(vllm.values()) == snap.prefix_cache_hits + snap.external_hits
    # SGLang's scheduler has no connector: its hits are all prefix-cache hits, host/disk stay 0
    radix = dataclasses.replace(snap, scheduler="sglang", prefix_cache_hits=300, external_hits=0)
    vllm = _by(render(radix, "tiny"), "vllm:prompt_tokens_cached_by_source_total", "source")
    assert (vllm["device"], vllm["host"], vllm["disk"]) == (300, 0, 0)
    no_storage = dataclasses.replace(snap, storage_tier=False, cached_storage=0)
    assert 'cache_source="storage"' not in render(no_storage, "tiny")
