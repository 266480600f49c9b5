"""The built-in server reports a host tier's share per request in SGLang's field: a request that
sets `return_cached_tokens_details` gets `sglext.cached_tokens_details` {device, host} beside
`usage.prompt_tokens_details.cached_tokens` (docs/tiers.md §4), on either engine."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare

TINY = ["model=tiny", "device=cpu", "engine.backend=torch", "engine.kv_capacity_tokens=640"]
VOCAB = 1024


def complete(client: httpx.Client, prompt: list[int], **fields: object) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0, **fields}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_a_host_hit_is_reported_per_tier_when_asked(engine):
    rng = np.random.default_rng(3)
    a, *fillers = (rng.integers(1, VOCAB, 300).tolist() for _ in range(4))
    cfg = compose_config([f"engine={engine}", *TINY, "engine.host_tier.tokens=4096"])
    with InProcessServer(prepare(cfg)) as server:
        client = httpx.Client(base_url=server.url, timeout=120)
        first = complete(client, a, return_cached_tokens_details=True)
        assert "sglext" not in first  # nothing cached: SGLang leaves the details out
        for prompt in fillers:  # push `a` out of the 640 device tokens
            complete(client, prompt)
        again = complete(client, a, return_cached_tokens_details=True)
        plain = complete(client, a)
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    details = again["sglext"]["cached_tokens_details"]
    assert details["host"] > 0 and details["device"] + details["host"] == cached
    assert "sglext" not in plain  # only when asked
    assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
