"""SGLang's front stage (engines/frontend.py): the awaited n > 1 prefix request and a program
batch's precached common prefix, held children in the engine, and the knob that turns them off."""

from __future__ import annotations

import pytest

from engines.config import EngineConfig
from engines.errors import BadInput
from engines.request import CompletionRequest
from tests.engine_util import make_engine

PROMPT = tuple(range(1, 101))  # 100 tokens


def _run(engine, submit) -> list:
    submit(engine)
    out = []
    while engine.has_work:
        step = engine.step()
        out.append(step)
    return out


def test_sglang_sends_the_prompt_once_then_the_samples():
    engine = make_engine("radix", scheduler="sglang")
    req = CompletionRequest("p", PROMPT, max_new_tokens=4, n=4)
    ids = engine.submit(req, 0.0)
    assert ids == ["0_p", "1_p", "2_p", "3_p"]
    assert [s.seq_id for s in engine.loop.waiting] == ["prefix_p"]  # samples held back
    steps = _run(engine, lambda e: None)
    (prefix,) = engine.frontend_records
    assert prefix.cached_tokens == 0 and prefix.output_tokens == 1
    # every sample was queued after the prefix finished and finds the prompt in the tree
    # (SGLang matches all but the last prompt token)
    assert all(r.cached_tokens == 99 for r in engine.records)
    assert all(r.scheduled_s >= prefix.finish_s for r in engine.records)
    assert sorted(r.request_id for r in engine.records) == ids
    assert sum(s.finished_parents.count("p") for s in steps) == 1


def test_knob_off_gives_vllm_fan_out_on_the_sglang_scheduler():
    engine = make_engine("radix", sglang_frontend=False)
    _run(engine, lambda e: e.submit(CompletionRequest("p", PROMPT, 4, n=4), 0.0))
    assert engine.frontend_records == []
    # all four admitted in one step: no same-step sharing in the tree
    assert [r.cached_tokens for r in engine.records] == [0, 0, 0, 0]


def test_vllm_scheduler_keeps_its_fan_out_and_refuses_the_knob():
    engine = make_engine("apc")
    _run(engine, lambda e: e.submit(CompletionRequest("p", PROMPT, 4, n=4), 0.0))
    assert engine.frontend_records == []
    assert sorted(r.cached_tokens for r in engine.records) == [0, 96, 96, 96]
    with pytest.raises(BadInput, match="sglang_frontend"):
        EngineConfig(cache="apc", sglang_frontend=False).validate()


def test_program_batch_precaches_the_common_prefix():
    engine = make_engine("radix")
    batch = [CompletionRequest(f"q{i}", PROMPT + (200 + i, 300 + i), 4) for i in range(3)]
    _run(engine, lambda e: e.submit_batch(batch, 0.0))
    (pre,) = engine.frontend_records
    assert pre.request_id == "precache_q0" and pre.prompt_tokens == 100
    assert sorted(r.cached_tokens for r in engine.records) == [100, 100, 100]


def test_program_batch_without_a_long_common_prefix_is_sent_as_is():
    engine = make_engine("radix")
    batch = [CompletionRequest(f"q{i}", (500 + i,) + PROMPT, 4) for i in range(3)]
    _run(engine, lambda e: e.submit_batch(batch, 0.0))
    assert engine.frontend_records == []
    assert len(engine.records) == 3


def test_vllm_batch_is_plain_submission():
    engine = make_engine("apc")
    batch = [CompletionRequest(f"q{i}", PROMPT + (200 + i,), 4) for i in range(3)]
    _run(engine, lambda e: e.submit_batch(batch, 0.0))
    assert engine.frontend_records == []
    assert sorted(r.cached_tokens for r in engine.records) == [0, 96, 96]


def test_abort_drops_held_samples():
    engine = make_engine("radix")
    engine.submit(CompletionRequest("p", PROMPT, 4, n=3), 0.0)
    assert engine.abort_request("p")
    while engine.has_work:
        engine.step()
    assert engine.records == [] and not engine.has_work
