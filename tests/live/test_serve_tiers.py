"""The built-in server reports a host tier's share per request in both engines' fields: vLLM's
`local_cached_tokens` / `external_cached_tokens` in `usage.prompt_tokens_details` whenever the
engine has a tier, SGLang's `sglext.cached_tokens_details` {device, host} when a request sets
`return_cached_tokens_details`; and in both engines' counters on /metrics (docs/tiers.md §4).
With a storage tier behind the host tier, vLLM's external part is host + storage, SGLang's
details gain `storage`, and each request's split equals the engine's own, run in this process."""

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


# A storage tier behind a host tier: six 300-token fillers push `a` out of the 640 device and
# the 1,280 host tokens, so its re-send hits storage (apc: vLLM's fs tier; radix: HiCache's file
# backend, prefetched with wait_complete so the whole hit arrives). radix's host pool also holds
# the device pages' copies, so a host tier no larger than the device leaves a prefetch little
# room (640 host tokens: 34 of the 299).
STORAGE = {
    "apc": ["engine.host_tier.tokens=1280", "engine.storage_tier.enabled=true"],
    "radix": [
        "engine.host_tier.tokens=1280",
        "engine.host_tier.write_policy=write_through",
        "engine.storage_tier.enabled=true",
        "engine.storage_tier.prefetch_policy=wait_complete",
    ],
}


def _series(text: str, name: str, label: str) -> dict[str, float]:
    """One counter's samples by the value of one label (parse() sums over labels)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, _, value = line.rpartition(" ")
            found = labels.split(f'{label}="', 1)[1].split('"', 1)[0]
            out[found] = float(value)
    return out


def _reference(cfg, prompts: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """The same prompts one at a time through an engine of the same config in this process:
    each request's (cached, device, host, storage) tokens."""
    from engines.build import build_engine
    from engines.request import CompletionRequest

    engine = build_engine(cfg.engine, cfg.model, executor="real", device=cfg.device)
    engine.restart()
    out = []
    for i, prompt in enumerate(prompts):
        engine.submit(CompletionRequest(f"ref-{i}", tuple(prompt), 4), engine.clock.now())
        records = []
        while engine.has_work:
            records += engine.step().finished
        engine.idle()
        (rec,) = records
        host, storage = rec.host_cached_tokens, rec.storage_cached_tokens
        out.append((rec.cached_tokens, rec.cached_tokens - host - storage, host, storage))
    return out


def _settle(prepared) -> None:
    """Let the server's engine run a finished request's last steps (a deferred free, a store)
    before the next request arrives, as the reference engine does."""
    thread = prepared.thread
    while thread.call(lambda: thread.engine.has_work).result(timeout=60):
        pass


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_a_storage_hit_is_reported_per_tier(engine):
    rng = np.random.default_rng(5)
    a, *fillers = (rng.integers(1, VOCAB, 300).tolist() for _ in range(7))
    prompts = [a, *fillers, a]
    cfg = compose_config([f"engine={engine}", *TINY, *STORAGE[engine]])
    prepared = prepare(cfg)
    with InProcessServer(prepared) as server:
        client = httpx.Client(base_url=server.url, timeout=120)
        replies = []
        for prompt in prompts:
            replies.append(complete(client, prompt, return_cached_tokens_details=True))
            _settle(prepared)
        text = client.get("/metrics").text
    expected = _reference(cfg, prompts)
    assert expected[-1][3] > 0  # the re-send of `a` is served from storage
    for reply, (cached, device, host, storage) in zip(replies, expected):
        assert _details(reply) == {"cached_tokens": cached, "local_cached_tokens": device,
                                   "external_cached_tokens": host + storage}  # fmt: skip
        if cached:
            details = reply["sglext"]["cached_tokens_details"]
            assert details == {"device": device, "host": host, "storage": storage,
                               "storage_backend": "HiCacheFile"}  # fmt: skip
        else:
            assert "sglext" not in reply
    metrics = parse(text)
    sums = [sum(e[i] for e in expected) for i in range(4)]
    cached, device, host, storage = sums
    assert _series(text, "sglang:cached_tokens_total", "cache_source") == {
        "device": device, "host": host, "storage": storage}  # fmt: skip
    by_source = _series(text, "vllm:prompt_tokens_cached_by_source_total", "source")
    external = metrics["vllm:external_prefix_cache_hits_total"]
    hits = metrics["vllm:prefix_cache_hits_total"]
    assert by_source["device"] == hits
    assert sum(by_source.values()) == hits + external == cached
    if engine == "apc":  # vLLM's connector: its hit is host + storage, split by source
        assert (external, by_source["host"], by_source["disk"]) == (host + storage, host, storage)
    else:  # SGLang's scheduler: no connector, every cached token is a prefix-cache hit
        assert external == by_source["host"] == by_source["disk"] == 0
