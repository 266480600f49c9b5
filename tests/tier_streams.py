"""Hand-made request streams for the host-tier tests: one request at a time through an engine with
the simulated executor, each run to its finish and the engine idled before the next is sent."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from engines.build import build_engine
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from engines.request import GenerationRequest
from engines.simulate.cost_model import HardwareConfig

TICKS = HardwareConfig(name="ticks", kind="fitted", step_overhead_s=0.01)
# TICKS with time priced on the tiers' links: 256 KV bytes a token (4 layers x 2 KV heads x 8 dims
# x 2 bytes x K and V), a 1 MB/s host link and a 100 kB/s storage link
STORAGE_PRICED = replace(
    TICKS,
    name="ticks_storage",
    num_layers=4,
    num_kv_heads=2,
    head_dim=8,
    kv_bytes_per_element=2.0,
    host_link_bandwidth=1e6,
    storage_bandwidth=1e5,
)
BYTES_PER_TOKEN = 256


def tier_engine(
    cache: str = "apc",
    kv_tokens: int = 640,
    step_log: bool = False,
    hardware: HardwareConfig = TICKS,
    plain: bool = False,
    **tier: Any,
):
    """An engine of `kv_tokens` device tokens and a host tier configured by `tier` (with
    `step_log`, the loop keeps each step's scheduled tokens per request), priced by `hardware`;
    `plain` runs SGLang's scheduler in its non-overlap loop (no effect on vLLM's)."""
    block = 16 if cache == "apc" else 1
    cfg = EngineConfig(
        cache=cache,
        block_size=block,
        kv_capacity_tokens=kv_tokens,
        max_num_batched_tokens=512,
        backend="torch",
        host_tier=HostTierConfig(**tier),
        step_log=step_log,
        overlap=not plain or cache == "apc",  # vLLM's scheduler keeps the knob's default
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=hardware
    )


class Prompts:
    """Fresh random prompts from one seeded generator (no two share a first token)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def tokens(self, n: int) -> tuple[int, ...]:
        self.count += 1
        head = [self.count * 7 + 1]  # a distinct first token: no accidental shared prefix
        return tuple(head + self.rng.integers(1, 30000, n - 1).tolist())


def send(engine, rid: str, prompt: tuple[int, ...], output: tuple[int, ...]) -> RequestRecord:
    """Run one request alone to its finish, then idle the engine; its record."""
    req = GenerationRequest(
        request_id=rid,
        prompt_ids=prompt,
        max_new_tokens=len(output),
        scripted_output_ids=output,
    )
    engine.add_request(req, engine.clock.now())
    while engine.has_work:
        engine.step()
    engine.idle()
    return next(r for r in engine.records if r.request_id == rid)


def tiers(rec: RequestRecord) -> tuple[int, int]:
    """(device, host) cached tokens of a record."""
    return rec.cached_tokens - rec.host_cached_tokens, rec.host_cached_tokens


def send_together(
    engine, requests: list[tuple[str, tuple[int, ...], tuple[int, ...]]]
) -> list[RequestRecord]:
    """Queue `requests` at once (a burst, in order), run them all to their finish, then idle the
    engine; their records in that order."""
    now = engine.clock.now()
    for rid, prompt, output in requests:
        req = GenerationRequest(
            request_id=rid,
            prompt_ids=prompt,
            max_new_tokens=len(output),
            scripted_output_ids=output,
        )
        engine.add_request(req, now)
    while engine.has_work:
        engine.step()
    engine.idle()
    by_id = {r.request_id: r for r in engine.records}
    return [by_id[rid] for rid, _, _ in requests]
