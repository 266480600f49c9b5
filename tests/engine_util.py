"""Helpers for engine-level tests: build a tiny-model engine and hand-made requests."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from hydra import compose, initialize_config_dir

from engines.build import build_engine
from engines.cache import DEFAULT_DESIGN, designs
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.request import GenerationRequest
from engines.simulate.cost_model import HardwareConfig
from harness.config.schema import CONF_DIR, to_schema
from workloads.request import Request

# every registered design at its preset's granularity
ENGINE_PRESETS: dict[str, dict[str, Any]] = {
    d.name: dict(cache=d.name, block_size=d.block_size) for d in designs()
}


def tiny_model():
    return PRESETS.get("tiny")


def make_engine(cache: str = DEFAULT_DESIGN, executor: str = "real", **overrides):
    fields: dict[str, Any] = {
        **ENGINE_PRESETS[cache],
        "kv_capacity_tokens": 4096,
        "max_num_batched_tokens": 512,
        "backend": "torch",
    }
    fields.update(overrides)
    cfg = EngineConfig(**fields)
    return build_engine(cfg, tiny_model(), executor=executor, device="cpu")


def shared_prompt_requests(
    seed: int = 0,
    groups: int = 2,
    per_group: int = 3,
    system_len: int = 40,
    question_len: int = 9,
    output_len: int = 5,
    vocab: int = 1024,
    scripted: bool = False,
    salt_of=None,
) -> list[GenerationRequest]:
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        system = rng.integers(1, vocab, system_len).tolist()
        for i in range(per_group):
            question = rng.integers(1, vocab, question_len).tolist()
            script = tuple(rng.integers(1, vocab, output_len).tolist()) if scripted else None
            rid = f"g{g}q{i}"
            out.append(
                GenerationRequest(
                    request_id=rid,
                    prompt_ids=tuple(system + question),
                    max_new_tokens=output_len,
                    scripted_output_ids=script,
                    salt=salt_of(rid) if salt_of else None,
                )
            )
    return out


def by_id(records):
    return {r.request_id: r for r in records}


def replace_all(requests, **changes):
    return [dataclasses.replace(r, **changes) for r in requests]


def as_workload(requests: list[GenerationRequest], **changes) -> list[Request]:
    """The same requests as a client sends them (for tests that need the client layer: a
    concurrency cap, conversation turns)."""
    return [
        dataclasses.replace(
            Request(
                request_id=r.request_id,
                prompt_ids=r.prompt_ids,
                output_ids=r.scripted_output_ids,
                max_new_tokens=None if r.scripted_output_ids is not None else r.max_new_tokens,
                arrival_s=r.arrival_s,
                salt=r.salt,
            ),
            **changes,
        )
        for r in requests
    ]


def hardware_preset(name: str):
    """A `conf/hardware` preset as its HardwareConfig."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_schema(compose(f"hardware/{name}")["hardware"], HardwareConfig)
