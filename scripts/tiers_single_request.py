"""vLLM's offloading-blog shape in simulation: one request's TTFT computed cold against loaded from
the host tier, Llama-3.1-8B on one H100 or GH200 (docs/tiers.md §8.3; its two tables are
checked by tests/run/test_tier_blog_shape_docs.py).

    python scripts/tiers_single_request.py [--hardware h100_llama3_8b_bf16|gh200_llama3_8b_bf16]

For each prompt length and design: send a fresh prompt (computed), push it out of a device cache
only a little larger than it with a second prompt, send it again (a host-tier hit, loaded over the
preset's host link) and print both TTFTs and their ratio. SGLang's scheduler runs its non-overlap
loop here: the overlap loop would hide the CPU part of a chunked prompt's later chunks (1 ms of a
16,384-token prompt at chunk 8,192), and the tables compare the designs' hits on one computed cost.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import NamedTuple

import numpy as np
from hydra import compose, initialize_config_dir

from engines.build import build_engine
from engines.cache import designs
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.engine import Engine
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from engines.request import GenerationRequest
from engines.simulate.cost_model import HardwareConfig
from harness.config.schema import CONF_DIR, register_configs, to_schema

LENGTHS = (1024, 4096, 16384, 65536)


def preset(name: str) -> HardwareConfig:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_schema(compose(f"hardware/{name}")["hardware"], HardwareConfig)


def send(engine: Engine, rid: str, prompt: tuple[int, ...]) -> RequestRecord:
    req = GenerationRequest(
        request_id=rid, prompt_ids=prompt, max_new_tokens=1, scripted_output_ids=(7,)
    )
    engine.add_request(req, engine.clock.now())
    while engine.has_work:
        engine.step()
    engine.idle()
    return next(r for r in engine.records if r.request_id == rid)


class Shape(NamedTuple):
    """One design at one prompt length: the cold and the host-hit TTFT."""

    cache: str
    tokens: int
    computed_s: float
    host_tokens: int
    hit_s: float
    load_s: float


def measure(hardware: str) -> list[Shape]:
    """Every design at every length of LENGTHS on the `hardware` preset (seeded prompts)."""
    hw = preset(hardware)
    model = dataclasses.replace(PRESETS.get("tiny"), max_position_embeddings=1 << 18)
    rng = np.random.default_rng(0)
    out = []
    for d in designs():  # each at its upstream size
        cache, block = d.name, d.block_size
        for n in LENGTHS:
            cfg = EngineConfig(
                cache=cache,
                block_size=block,
                overlap=d.upstream_scheduler != "sglang",  # the knob's default where unread
                kv_capacity_tokens=n + 64,
                max_num_batched_tokens=8192,
                backend="torch",
                host_tier=HostTierConfig(tokens=4 * n),
            )
            cfg.validate()
            engine = build_engine(cfg, model, executor="simulated", device="cpu", hardware=hw)
            a, other = (tuple(rng.integers(1, 30000, n).tolist()) for _ in range(2))
            cold = send(engine, "cold", a)
            send(engine, "other", other)
            hit = send(engine, "hit", a)
            cold_s, hit_s = (r.first_token_s - r.arrival_s for r in (cold, hit))
            out.append(Shape(cache, n, cold_s, hit.host_cached_tokens, hit_s, hit.host_load_s))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100_llama3_8b_bf16")
    for s in measure(parser.parse_args().hardware):
        print(
            f"{s.cache:5s} {s.tokens:6d} tokens: computed {s.computed_s * 1e3:8.1f} ms, host hit "
            f"{s.host_tokens:6d} tokens {s.hit_s * 1e3:7.1f} ms (load "
            f"{s.load_s * 1e3:6.1f} ms): {s.computed_s / s.hit_s:5.1f}x lower"
        )


if __name__ == "__main__":
    main()
