"""When does a prefix become matchable: one test per scheduler mode (docs/scheduler_x_cache.md).

Each mode runs with its upstream cache: vLLM's scheduler over the hash table (block 16), sync and
async; SGLang's over the radix tree (page 1), without and with the overlap loop. Request A is
prefilled in step 0 and generates 8 tokens; a probe joins the queue before step d and counts as
a hit when it reuses the prefix in question. The lag is the first hitting d minus the step that
made the prefix (the prefill, the step computing the block's last generated token, or, where
output is inserted only at a finish, the step A finished in). A prefix shared inside one step: A
and a probe join together.
"""

from __future__ import annotations

import numpy as np
import pytest

from engines.request import GenerationRequest
from tests.stepwise import request, run_steps, step_engine

PROMPT = np.random.default_rng(3).integers(100, 1000, 60).tolist()
OUT = list(range(900, 908))  # A's scripted output (tests.stepwise.request)

MODES = {
    "vllm_sync": dict(cache="apc", block_size=16, async_scheduling=False),
    "vllm_async": dict(cache="apc", block_size=16, async_scheduling=True),
    "sglang": dict(cache="radix", block_size=1, overlap=False),
    "sglang_overlap": dict(cache="radix", block_size=1, overlap=True),
}


def probe(tokens: list[int]) -> GenerationRequest:
    return request("probe", tokens + [5, 6, 7, 8], max_new=1)


def run(mode: str, d: int, probe_tokens: list[int]) -> tuple[int, list[tuple[str, ...]]]:
    """(the probe's cached tokens, each step's request ids) with the probe joining before step d."""
    engine = step_engine(max_num_batched_tokens=512, decode_runs=False, **MODES[mode])
    joins: list[list[GenerationRequest]] = [[] for _ in range(d + 1)]
    joins[0].append(request("a", PROMPT, max_new=8))
    joins[d].append(probe(probe_tokens))
    cached = run_steps(engine, joins)["probe"]
    steps = [tuple(rid for rid, _ in rec.scheduled) for rec in engine.loop.step_log or []]
    return cached, steps


def first_hit(mode: str, probe_tokens: list[int], needed: int) -> tuple[int, list[tuple[str, ...]]]:
    for d in range(1, 16):
        cached, steps = run(mode, d, probe_tokens)
        if cached >= needed:
            return d, steps
    raise AssertionError(f"{mode}: the probe never matched {needed} tokens")


# mode -> (prompt lag, generated-block lag, generated lag counted from, shared inside one step)
TABLE = {
    "vllm_sync": (1, 0, "computed", True),
    "vllm_async": (1, 1, "computed", True),
    "sglang": (1, 1, "finished", False),
    "sglang_overlap": (2, 2, "finished", False),
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_when_a_prefix_becomes_matchable(mode):
    prompt_lag, gen_lag, gen_from, same_step = TABLE[mode]
    # prompt: A's 60-token prompt, prefilled in step 0; the probe needs its whole blocks
    d, _ = first_hit(mode, PROMPT, 48)
    assert d - 0 == prompt_lag
    # generated: positions 60..63 are A's first 4 outputs; block [48, 64) completes with the
    # 4th, sampled in step 3 and computed in step 4 (its decode); the tree takes output at finish
    d, steps = first_hit(mode, PROMPT + OUT[:4], 64)
    a_steps = [i for i, ids in enumerate(steps) if "a" in ids]
    made = a_steps[4] if gen_from == "computed" else a_steps[-1]
    assert d - made == gen_lag
    # a prefix shared inside one step: A and the probe prefilled together
    cached, steps = run(mode, 0, PROMPT)
    assert steps[0] == ("a", "probe")
    assert (cached >= 48) is same_step
