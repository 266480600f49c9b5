"""The simulated executor prices SGLang's overlap loop: each step's CPU part (`step_overhead_s`)
hidden behind the previous step's GPU part; the first step of a back-to-back stretch pays it."""

from __future__ import annotations

import numpy as np
import pytest

from engines.batch import run_batch
from engines.request import GenerationRequest
from tests.stepwise import request, step_engine

OVERHEAD_S = 1e-3  # conf/hardware/h100_llama3_8b_bf16.yaml step_overhead_s


def finish_time(overlap: bool) -> float:
    engine = step_engine(cache="radix", block_size=1, overlap=overlap)
    (record,) = run_batch(engine, [request("a", list(range(100, 400)), max_new=50)])
    return record.finish_s


def test_every_step_after_the_first_hides_its_cpu_part():
    """One request, 50 steps back to back (a prefill, 49 decodes, each over 1 ms of GPU work)."""
    assert finish_time(False) - finish_time(True) == pytest.approx(49 * OVERHEAD_S, rel=1e-9)


def test_a_gap_pays_the_cpu_part_again():
    """Two requests far apart: two stretches, each with one step that pays its CPU part."""
    times = {}
    for overlap in (False, True):
        engine = step_engine(cache="radix", block_size=1, overlap=overlap)
        reqs = [
            request("a", list(range(100, 400)), max_new=10),
            GenerationRequest("b", tuple(range(500, 800)), 10, (1,) * 10, arrival_s=5.0),
        ]
        times[overlap] = {r.request_id: r.finish_s for r in run_batch(engine, reqs)}
    saved = {rid: times[False][rid] - times[True][rid] for rid in ("a", "b")}
    assert saved["a"] == pytest.approx(9 * OVERHEAD_S, rel=1e-9)
    assert saved["b"] == pytest.approx(9 * OVERHEAD_S, rel=1e-9)  # b's stretch starts at 5 s


def test_decode_runs_price_overlap_step_for_step():
    """A decode run prices the overlap exactly as its steps one by one (token times equal)."""
    rng = np.random.default_rng(4)
    reqs = [
        GenerationRequest(
            f"r{i}",
            tuple(rng.integers(100, 1000, int(rng.integers(20, 300))).tolist()),
            int(rng.integers(1, 200)),
            tuple(rng.integers(100, 1000, 200).tolist()),
            arrival_s=float(i) * 0.05,
        )
        for i in range(12)
    ]
    got = []
    for runs in (True, False):
        engine = step_engine(cache="radix", block_size=1, overlap=True, decode_runs=runs)
        recs = sorted(run_batch(engine, reqs), key=lambda r: r.request_id)
        got.append([(r.request_id, r.cached_tokens, tuple(r.token_times_s)) for r in recs])
    assert got[0] == got[1]


def test_the_vllm_scheduler_is_priced_as_before():
    """`engine.overlap` is the SGLang scheduler's knob; vLLM's scheduler never hides anything."""
    engine = step_engine(cache="radix", scheduler="vllm", block_size=1)
    assert getattr(engine.executor, "overlap", None) is None
