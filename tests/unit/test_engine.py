"""The engine end to end on the tiny model: outputs never depend on the cache, hits are right,
accounting returns to empty."""

from __future__ import annotations

import pytest

from engines.batch import run_batch
from engines.cache import DESIGNS
from tests.engine_util import by_id, make_engine, shared_prompt_requests

CACHES = DESIGNS.names()  # every registered design


def _outputs(cache: str, **overrides):
    engine = make_engine(cache, **overrides)
    records = run_batch(engine, shared_prompt_requests())
    return engine, {rid: r.output_ids for rid, r in by_id(records).items()}


@pytest.mark.parametrize("cache", CACHES)
def test_outputs_identical_with_caching_on_and_off(cache):
    _, on = _outputs(cache)
    _, off = _outputs(cache, prefix_caching=False)
    assert on == off


def test_outputs_identical_between_apc_and_radix():
    _, apc = _outputs("apc")
    _, radix = _outputs("radix")
    assert apc == radix


@pytest.mark.parametrize("cache", CACHES)
def test_cache_is_empty_of_holds_at_idle(cache):
    engine, _ = _outputs(cache)
    engine.cache.check_integrity()
    usage = engine.cache.usage()
    assert usage.protected == 0
    assert engine.cache.reset()


@pytest.mark.parametrize("cache", CACHES)
def test_reset_counters_starts_a_measured_window_from_zero(cache):
    """What the pipeline calls after the flush: the steps and bookkeeping time of the warm-up
    are not the measured window's; the step log keeps every step since the build."""
    engine = make_engine(cache, step_log=True)
    run_batch(engine, shared_prompt_requests())
    steps_before = engine.loop.num_steps
    assert steps_before > 0 and engine.loop.bookkeeping_ns > 0
    assert engine.loop.step_log is not None and len(engine.loop.step_log) == steps_before
    engine.reset_counters()
    assert engine.loop.num_steps == 0 and engine.loop.bookkeeping_ns == 0
    assert len(engine.loop.step_log) == steps_before
    run_batch(engine, shared_prompt_requests(seed=1))
    assert 0 < engine.loop.num_steps == len(engine.loop.step_log) - steps_before


@pytest.mark.parametrize("cache,granularity", [("apc", 16), ("radix", 1), ("radix", 4)])
def test_sequential_shared_prompt_hits_granularity_aligned_prefix(cache, granularity):
    # One request at a time (max_num_seqs=1): every later prompt of a group reuses the system
    # prompt, aligned down to the granularity and capped by the last-token rule.
    engine = make_engine(cache, block_size=granularity, max_num_seqs=1)
    requests = shared_prompt_requests(system_len=40, question_len=9)
    records = by_id(run_batch(engine, requests))
    for req in requests:
        first_of_group = req.request_id.endswith("q0")
        expected = 0 if first_of_group else (40 // granularity) * granularity
        assert records[req.request_id].cached_tokens == expected, req.request_id


@pytest.mark.parametrize("cache", CACHES)
def test_scripted_decoding_emits_the_script(cache):
    engine = make_engine(cache)
    requests = shared_prompt_requests(scripted=True)
    records = by_id(run_batch(engine, requests))
    for req in requests:
        assert records[req.request_id].output_ids == req.scripted_output_ids


@pytest.mark.parametrize("cache", CACHES)
def test_preemption_under_pressure_keeps_outputs(cache):
    # Capacity for about two sequences at once forces preemption/retraction of the others.
    reqs = shared_prompt_requests(
        groups=3, per_group=2, system_len=30, question_len=10, output_len=12
    )
    small = make_engine(cache, kv_capacity_tokens=112, max_num_batched_tokens=64, debug_checks=True)
    records = by_id(run_batch(small, reqs))
    big = make_engine(cache)
    reference = by_id(run_batch(big, reqs))
    assert {k: r.output_ids for k, r in records.items()} == {
        k: r.output_ids for k, r in reference.items()
    }
    small.cache.check_integrity()
    assert small.cache.usage().protected == 0
