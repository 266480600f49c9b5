"""Drive an engine iteration by iteration: requests join before a given step, as a hand-made
case states it ("the second request one iteration later"), on the simulated executor."""

from __future__ import annotations

from engines.build import build_engine
from engines.config import EngineConfig
from engines.engine import Engine
from engines.request import GenerationRequest
from tests.engine_util import hardware_preset, tiny_model


def step_engine(**fields) -> Engine:
    """A tiny-model engine on the simulated executor (H100 / Llama-3.1-8B prices), step log on."""
    cfg = EngineConfig(
        **{"kv_capacity_tokens": 65536, "max_num_seqs": 64, "step_log": True, **fields}
    )
    hardware = hardware_preset("h100_llama3_8b_bf16")
    return build_engine(cfg, tiny_model(), executor="simulated", device="cpu", hardware=hardware)


def request(rid: str, prompt: list[int], max_new: int = 4) -> GenerationRequest:
    return GenerationRequest(
        request_id=rid,
        prompt_ids=tuple(prompt),
        max_new_tokens=max_new,
        scripted_output_ids=tuple(range(900, 900 + max_new)),
    )


def run_steps(engine: Engine, joins: list[list[GenerationRequest]]) -> dict[str, int]:
    """`joins[i]` is received by iteration i (as a driver of upstream's loop hands requests to
    its receive): it arrives when step i - 1 started, before SGLang's overlap loop formed step i.
    Iterate until nothing is left; an iteration with nothing to run idles the engine. Returns
    each request's cached tokens."""
    i, started = 0, engine.clock.now()
    while i < len(joins) or engine.has_work:
        for req in joins[i] if i < len(joins) else []:
            engine.add_request(req, started)
        i += 1
        started = engine.clock.now()
        if engine.has_work:
            engine.step()
        else:
            engine.idle()
    engine.idle()
    return {r.request_id: r.cached_tokens for r in engine.records}
