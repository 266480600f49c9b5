"""The built-in server reports a host tier's share per request in both engines' fields: vLLM's
`local_cached_tokens` / `external_cached_tokens` in `usage.prompt_tokens_details` whenever the
engine has a tier, SGLang's `sglext.cached_tokens_details` {device, host} when a request sets
`return_cached_tokens_details`; and in both engines' counters on /metrics (docs/tiers.md §4)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from harness.builtin_server.metrics import parse
from harness.builtin_server.server import InProcessServer, compose_config, prepare

TINY = ["model=tiny", "device=cpu", "engine.backend=torch", "engine.kv_capacity_tokens=640"]
VOCAB = 1024


def complete(client: httpx.Client, prompt: list[int], **fields: object) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0, **fields}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _details(reply: dict) -> dict:
    return reply["usage"]["prompt_tokens_details"]


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_a_host_hit_is_reported_per_tier(engine):
    rng = np.random.default_rng(3)
    a, *fillers = (rng.integers(1, VOCAB, 300).tolist() for _ in range(4))
    cfg = compose_config([f"engine={engine}", *TINY, "engine.host_tier.tokens=4096"])
    with InProcessServer(prepare(cfg)) as server:
        client = httpx.Client(base_url=server.url, timeout=120)
        replies = [complete(client, a, return_cached_tokens_details=True)]
        first = replies[0]
        assert "sglext" not in first  # nothing cached: SGLang leaves the details out
        for prompt in fillers:  # push `a` out of the 640 device tokens
            replies.append(complete(client, prompt))
        again = complete(client, a, return_cached_tokens_details=True)
        plain = complete(client, a)
        replies += [again, plain]
        metrics = parse(client.get("/metrics").text)
    cached = _details(again)["cached_tokens"]
    details = again["sglext"]["cached_tokens_details"]
    assert details["host"] > 0 and details["device"] + details["host"] == cached
    assert _details(again)["external_cached_tokens"] == details["host"]
    assert _details(again)["local_cached_tokens"] == details["device"]
    assert _details(first) == {"cached_tokens": 0, "local_cached_tokens": 0,
                               "external_cached_tokens": 0}  # fmt: skip
    assert "sglext" not in plain  # only when asked
    assert _details(plain)["cached_tokens"] > 0
    # the counters are the replies' sums (one sample a request, every request finished)
    host = sum(_details(r)["external_cached_tokens"] for r in replies)
    device = sum(_details(r)["local_cached_tokens"] for r in replies)
    prompts = sum(r["usage"]["prompt_tokens"] for r in replies)
    assert host >= details["host"]
    assert metrics["sglang:cached_tokens_total"] == host + device
    # vLLM's cached tokens are its prefix-cache hits plus its connector's; SGLang's scheduler
    # has no connector and counts the host part among the prefix-cache hits
    external = metrics["vllm:external_prefix_cache_hits_total"]
    assert external == (host if engine == "apc" else 0)
    assert metrics["vllm:prefix_cache_hits_total"] + external == host + device
    queries = metrics["vllm:external_prefix_cache_queries_total"]
    assert queries == (prompts - device if engine == "apc" else 0)


def test_without_a_tier_usage_and_counters_carry_no_tier():
    rng = np.random.default_rng(4)
    a = rng.integers(1, VOCAB, 300).tolist()
    cfg = compose_config(["engine=apc", *TINY])
    with InProcessServer(prepare(cfg)) as server:
        client = httpx.Client(base_url=server.url, timeout=120)
        complete(client, a)
        again = complete(client, a, return_cached_tokens_details=True)
        text = client.get("/metrics").text
    assert set(_details(again)) == {"cached_tokens"}  # vLLM's usage as before
    assert again["sglext"]["cached_tokens_details"]["host"] == 0
    metrics = parse(text)
    assert metrics["vllm:external_prefix_cache_queries_total"] == 0
    assert metrics["vllm:external_prefix_cache_hits_total"] == 0
    assert 'cache_source="host"' not in text and "host_tier_tokens" not in text
    assert metrics["sglang:cached_tokens_total"] == _details(again)["cached_tokens"] > 0
