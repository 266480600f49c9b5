"""The real executor moves real K/V through a host tier (engines/host_pool.py, docs/tiers.md §7.3):
a prompt evicted from the device and loaded back from the host gives the same first-token logits
and greedy output as computing it with caching off, on both designs (tiny model, CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engines.cache.tiers import HostTierConfig
from engines.request import GenerationRequest
from tests.engine_util import make_engine

OUT_LEN = 6


def prompts(seed: int = 0, n: int = 4, length: int = 100) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(rng.integers(1, 1000, length).tolist()) for _ in range(n)]


def serve(engine, stream: list[tuple[str, tuple[int, ...]]]):
    """Each request alone to its finish (greedy), then the engine idles; records by id."""
    engine.executor.first_logits = {}
    for rid, prompt in stream:
        req = GenerationRequest(request_id=rid, prompt_ids=prompt, max_new_tokens=OUT_LEN)
        engine.add_request(req, engine.clock.now())
        while engine.has_work:
            engine.step()
        engine.idle()
    return {r.request_id: r for r in engine.records}, engine.executor.first_logits


@pytest.mark.parametrize(
    ("cache", "block", "tier"),
    [
        ("apc", 16, {}),
        ("apc", 16, {"blocks_per_chunk": 2}),
        ("radix", 1, {"write_policy": "write_through"}),
        ("radix", 1, {"write_policy": "write_back"}),
    ],
)
def test_a_host_hit_loads_real_kv_and_decodes_as_caching_off(cache, block, tier):
    a, *fillers = prompts()
    stream = [("a1", a)] + [(f"f{i}", p) for i, p in enumerate(fillers)] + [("a2", a)]
    # 160 device tokens: three 100-token fillers push `a` out; the host tier holds everything
    tiered = make_engine(
        cache,
        block_size=block,
        kv_capacity_tokens=160,
        host_tier=HostTierConfig(tokens=2048, **tier),
    )
    records, logits = serve(tiered, stream)
    off = make_engine(cache, block_size=block, kv_capacity_tokens=160, prefix_caching=False)
    ref_records, ref_logits = serve(off, [("a2", a)])
    hit = records["a2"]
    assert hit.host_cached_tokens > 0 and hit.cached_tokens == hit.host_cached_tokens
    assert hit.host_load_bytes == hit.host_cached_tokens * tiered.executor.kv_pool.bytes_per_token
    assert hit.output_ids == ref_records["a2"].output_ids == records["a1"].output_ids
    torch.testing.assert_close(logits["a2"], ref_logits["a2"], rtol=1e-4, atol=1e-4)
