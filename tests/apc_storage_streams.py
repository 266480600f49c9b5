"""apc engines with vLLM's file-system tier behind the CPU tier, and the hand-made and generated
request streams both storage-tier tests send (tests/unit/test_apc_storage_tier.py against the
rules, tests/live/test_apc_storage_vs_vllm_tiering.py against vLLM's own tiering manager)."""

from __future__ import annotations

import numpy as np

from engines.build import build_engine
from engines.cache.storage_tier import StorageTierConfig
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from tests.tier_streams import TICKS, Prompts

OUT = (101, 102, 103, 104)
Stream = list[tuple[str, tuple[int, ...], tuple[int, ...]]]


def storage_engine(kv_tokens: int = 640, storage: bool = True, **tier: object):
    """An apc engine of `kv_tokens` device tokens, a CPU tier configured by `tier` and (with
    `storage`) the file-system tier behind it, on the simulated executor."""
    cfg = EngineConfig(
        cache="apc",
        block_size=16,
        kv_capacity_tokens=kv_tokens,
        max_num_batched_tokens=512,
        backend="torch",
        host_tier=HostTierConfig(**tier),  # type: ignore[arg-type]
        storage_tier=StorageTierConfig(enabled=storage),
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=TICKS
    )


def per_tier(rec: RequestRecord) -> tuple[int, int, int]:
    """(device, host, storage) cached tokens of a record (device + host + storage = cached)."""
    device = rec.cached_tokens - rec.host_cached_tokens - rec.storage_cached_tokens
    return device, rec.host_cached_tokens, rec.storage_cached_tokens


def resend(n_fill: int = 4, length: int = 300, seed: int = 0) -> Stream:
    """A prompt, `n_fill` others that push it out of the device and the CPU tier, the prompt again."""
    p = Prompts(seed)
    a = p.tokens(length)
    fills = [(f"f{i}", p.tokens(300), OUT) for i in range(n_fill)]
    return [("a1", a, OUT), *fills, ("a2", a, OUT)]


def tail_evicted(seed: int = 5) -> Stream:
    """The CPU tier drops the prompt's tail only (LRU: the head of a finished request is the most
    recent): the re-sent prompt loads its head from the CPU tier and its tail from storage."""
    p = Prompts(seed)
    a = p.tokens(300)
    return [("a1", a, OUT), ("f0", p.tokens(300), OUT), ("f1", p.tokens(100), OUT), ("a2", a, OUT)]


def conversation(seed: int = 3) -> Stream:
    """Turn 2 extends turn 1 (its reply included) after fills evicted it from both tiers."""
    p = Prompts(seed)
    turn1, reply = p.tokens(300), tuple(range(2000, 2040))
    fills = [(f"f{i}", p.tokens(300), OUT) for i in range(4)]
    return [("t1", turn1, reply), *fills, ("t2", turn1 + reply + p.tokens(30), OUT)]


def generated(seed: int, num: int = 40) -> Stream:
    """Prompts from five families (a shared head of 40-200 tokens, then their own 10-200)."""
    rng = np.random.default_rng(seed)
    p = Prompts(100 + seed)
    heads = [p.tokens(int(rng.integers(40, 200))) for _ in range(5)]
    out: Stream = []
    for i in range(num):
        head = heads[int(rng.integers(0, 5))]
        tail = tuple(rng.integers(1, 30000, int(rng.integers(10, 200))).tolist())
        reply = tuple(rng.integers(1, 30000, int(rng.integers(2, 24))).tolist())
        out.append((f"g{i}", head + tail, reply))
    return out
