"""SGLang's scheduler step for step (docs/radix.md, the scheduler's iteration order, 0.5.23).

By construction: finished requests leave the running batch at the start of every iteration (a
full batch where one finishes prefills a waiting request next; warm-up requests never reach the
measured run's batch), the decode memory check counts pages only where one opens (page 16, all
mid-page: no page needed, no retraction), and an idle engine resets `new_token_ratio`.
Against upstream: the worst run of the check against SGLang 0.5.23's real Scheduler, with
upstream's own figures (not values regenerated from this code), read from the step log.
"""

from __future__ import annotations

import json

import pytest

from engines.batch import run_batch
from engines.build import build_engine
from engines.config import EngineConfig
from engines.request import GenerationRequest
from engines.sched.sglang import SglangScheduler
from engines.sequence import Sequence
from engines.step_log import DECODE, PREFILL
from tests.engine_util import hardware_preset, tiny_model
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness


def radix_engine(**fields):
    """SGLang's scheduler in its non-overlap loop, the one this module's rules are stated for
    (the overlap loop's: tests/unit/test_sglang_overlap.py)."""
    base = {"cache": "radix", "block_size": 1, "step_log": True, "overlap": False}
    cfg = EngineConfig(**{**base, **fields})
    hardware = hardware_preset("h100_llama3_8b_bf16")
    return build_engine(cfg, tiny_model(), executor="simulated", device="cpu", hardware=hardware)


def request(rid: str, first_token: int, prompt_len: int, max_new: int) -> GenerationRequest:
    """Distinct prompts per `first_token` (no shared prefix), scripted outputs."""
    prompt = tuple(range(first_token, first_token + prompt_len))
    return GenerationRequest(
        request_id=rid,
        prompt_ids=prompt,
        max_new_tokens=max_new,
        scripted_output_ids=tuple([5] * max_new),
    )


def sequence(rid: str, first_token: int, prompt_len: int, max_new: int) -> Sequence:
    prompt = list(range(first_token, first_token + prompt_len))
    return Sequence(rid, prompt, len(prompt), max_new)


def step(loop):
    """One schedule/complete round, sampling token 5 wherever a step reaches the known end."""
    plan = loop.schedule()
    loop.complete(plan, {i.seq.seq_id: 5 for i in plan.scheduled if i.end == i.seq.num_tokens})
    return plan


def scheduler(engine) -> SglangScheduler:
    admission = engine.loop.scheduler
    assert isinstance(admission, SglangScheduler)
    return admission


# --------------------------------------------------- rule 1: finished requests leave every iteration
def test_a_finish_in_a_full_batch_is_followed_by_a_prefill():
    """Two running (the limit), one waiting: the decode step in which `a` finishes is followed
    directly by `c`'s prefill, with no decode step in between."""
    engine = radix_engine(max_num_seqs=2)
    reqs = [request("a", 100, 8, 2), request("b", 200, 8, 6), request("c", 300, 8, 2)]
    run_batch(engine, reqs)
    log = engine.loop.step_log
    kinds = [(s.kind, [rid for rid, _ in s.scheduled]) for s in log]
    assert kinds[:3] == [
        (PREFILL, ["a", "b"]),  # c waits: the batch is full
        (DECODE, ["a", "b"]),  # a samples its second (last) token
        (PREFILL, ["c"]),  # a left at the start of this iteration and un-filled the batch
    ]


def test_warm_up_requests_never_reach_the_measured_batch():
    """A warm-up whose requests all finish in one decode step, a flush, then as many requests as
    the running limit: the measured run's very first iteration admits all of them, with none of
    the warm-up's left in the batch (upstream filtered them before its first prefill round)."""
    engine = radix_engine(max_num_seqs=3)
    run_batch(engine, [request(f"w{i}", 100 * (i + 1), 8, 3) for i in range(3)])
    assert engine.loop.step_log[-1].kind == DECODE  # all three finished in a decode step
    assert engine.cache.reset()
    loop, sched = engine.loop, scheduler(engine)
    for i in range(3):
        loop.add(sequence(f"m{i}", 1000 + 100 * i, 8, 3))
    plan = step(loop)
    assert [item.seq.seq_id for item in plan.scheduled] == ["m0", "m1", "m2"]
    assert [seq.seq_id for seq in sched.batch] == ["m0", "m1", "m2"]


# --------------------------------------------------- rule 2: a decode needs a page where one opens
def test_mid_page_batch_needs_no_page_and_does_not_retract():
    """Page 16, 160 KV tokens. `a` (prompt 17, 100 new) decodes 85 tokens alone, then `b` (prompt
    17, 2 new) is admitted: the adder counts only part of `a`'s remaining 15 tokens. After `b`'s
    prefill 16 tokens are free, less than one page per request (32), but both requests sit
    mid-page (101 and 17 committed), so the next decode needs no page and retracts nobody."""
    engine = radix_engine(block_size=16, kv_capacity_tokens=160)
    loop, sched = engine.loop, scheduler(engine)
    a, b = sequence("a", 100, 17, 100), sequence("b", 300, 17, 2)
    loop.add(a)
    while a.num_output_tokens < 85:
        step(loop)
    loop.add(b)
    assert [i.seq.seq_id for i in step(loop).scheduled] == ["b"]  # admitted, prefilled
    assert (a.num_computed_tokens, b.num_computed_tokens) == (101, 17)  # neither on a boundary
    assert engine.cache.free_tokens() < 2 * 16  # what one page per request would have asked
    assert sched._decode_need(sched.batch) == 0
    plan = step(loop)
    assert plan.preempted == []
    assert [i.seq.seq_id for i in plan.scheduled] == ["a", "b"]
    assert a.num_preemptions == b.num_preemptions == 0


def test_a_request_on_a_page_boundary_needs_one_page():
    sched = scheduler(radix_engine(block_size=16))
    on, mid = sequence("on", 1, 32, 4), sequence("mid", 100, 33, 4)
    on.num_computed_tokens, mid.num_computed_tokens = 32, 33
    assert sched._decode_need([on, mid]) == 16
    assert sched._decode_need([mid]) == 0


# --------------------------------------------------- rule 3: an idle engine resets the ratio
def test_ratio_after_warm_up_and_flush_is_the_initial_one():
    engine = radix_engine()
    sched = scheduler(engine)
    loop = engine.loop
    loop.add(sequence("w", 100, 8, 20))
    while loop.has_work:
        step(loop)
        if loop.has_work:
            decayed = sched.new_token_ratio
    assert decayed < sched.init_new_token_ratio  # the warm-up's decode steps decayed it
    loop.idle()  # the engine's next iteration finds nothing to run
    assert engine.cache.reset()
    assert sched.new_token_ratio == sched.init_new_token_ratio
    # Through the engine: its run ends idle, and that idle iteration filtered the batch too.
    run_batch(engine, [request("w2", 500, 8, 20)])
    assert sched.batch == []
    assert engine.cache.reset()
    assert sched.new_token_ratio == sched.init_new_token_ratio


# --------------------------------------------------- upstream's figures (SGLang 0.5.23, real Scheduler)
# in its non-overlap loop, the one these figures were taken from
WORST = [
    "workload=system_prompt",
    "engine=radix",
    "engine.overlap=false",
    "model=tiny",
    "executor=simulated",
    "hardware=cpu_measured",
    "load.mode=burst",
    "engine.max_num_seqs=64",
    "engine.max_num_batched_tokens=2048",
    "engine.kv_capacity_tokens=4096",
    "workload.output_len=400",
    "engine.step_log=true",
]
PAGE_16 = [
    "workload=system_prompt",
    "engine=radix",
    "engine.overlap=false",
    "model=tiny",
    "executor=simulated",
    "hardware=cpu_measured",
    "load.mode=burst",
    "engine.block_size=16",
    "engine.kv_capacity_tokens=2048",
    "engine.step_log=true",
]


def run_steps(overrides, run_dir):
    run = run_harness(overrides, run_dir)
    assert run.returncode == 0, run.stderr
    lines = (run_dir / "steps.jsonl").read_text().splitlines()
    return run.summary, [json.loads(line) for line in lines]


def first_step_of(steps, rid: str) -> int:
    """1-based, counted from the warm-up's first step, as upstream's replay counts."""
    return next(s["step"] for s in steps if any(r == rid for r, _ in s["requests"])) + 1


def test_worst_run_matches_upstream(tmp_path):
    summary, steps = run_steps(WORST, tmp_path)
    assert first_step_of(steps, "g2-q0") == 406  # upstream; the project admitted it at step 8
    assert sum(len(s["preempted"]) for s in steps) == 5  # upstream's retractions
    assert summary["prompt_tokens_cached"] == 10_752  # upstream's cached tokens total
    assert summary["num_preemptions"] == 5  # the measured run's: all of them


def test_page_16_run_retracts_as_upstream(tmp_path):
    summary, steps = run_steps(PAGE_16, tmp_path)
    assert sum(len(s["preempted"]) for s in steps) == 0  # upstream; the project retracted twice
    assert summary["num_preemptions"] == 0


@pytest.mark.parametrize("overrides", [WORST, PAGE_16], ids=["worst", "page16"])
def test_step_log_is_the_same_with_decode_runs_off(overrides, tmp_path):
    _, with_runs = run_steps(overrides, tmp_path / "on")
    _, stepped = run_steps([*overrides, "engine.decode_runs=false"], tmp_path / "off")
    assert with_runs == stepped


# --------------------------------------------------- the step log in the run directory
def test_steps_jsonl_is_written_only_with_the_knob(tmp_path):
    base = merged(SMALL, SYSTEM_PROMPT_SMALL, ["executor=simulated", "hardware=cpu_measured"])
    off = run_harness(base, tmp_path / "off")
    assert off.returncode == 0, off.stderr
    assert not (tmp_path / "off" / "steps.jsonl").exists()
    summary, steps = run_steps([*base, "engine.step_log=true"], tmp_path / "on")
    assert [s["step"] for s in steps] == list(range(len(steps)))
    warm_up = len(steps) - summary["num_steps"]  # the measured run's steps come last
    assert warm_up > 0
    measured = {r for s in steps[warm_up:] for r, _ in s["requests"]}
    assert measured == {f"g{g}-q{i}" for g in range(2) for i in range(3)}
    assert {s["kind"] for s in steps} <= {"prefill", "decode", "mixed"}
