"""The simulated executor: cost-model closed forms, the virtual clock, and identical cache behaviour.

The real and simulated executors run the same scheduler and caches, so on burst arrivals (no
timing-dependent release) every per-request hit count and preemption must be identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from engines.batch import run_batch
from engines.build import build_engine
from engines.config import EngineConfig
from engines.model.presets import get_preset
from engines.registry import UnknownNameError
from engines.request import GenerationRequest
from engines.sched.base import ScheduledSeq, StepPlan
from engines.sequence import Sequence
from engines.simulate.cost_model import (
    FittedCostModel,
    HardwareConfig,
    RooflineCostModel,
    StepShape,
    build_cost_model,
)
from harness.client.inprocess import drive
from tests.engine_util import as_workload
from workloads.request import Request

CONF = Path(__file__).resolve().parents[2] / "conf"

# Hand numbers: 1e15 FLOP/s at 50% and 1e12 B/s at 50% -> 5e14 FLOP/s and 5e11 B/s effective.
HAND = dict(
    name="hand",
    kind="roofline",
    peak_flops=1e15,
    flops_utilization=0.5,
    memory_bandwidth=1e12,
    bandwidth_efficiency=0.5,
    num_params=1e9,
    num_layers=10,
    hidden_size=512,
    num_heads=8,
    num_kv_heads=2,
    head_dim=64,
    bytes_per_param=2.0,
    kv_bytes_per_element=2.0,
    step_overhead_s=1e-3,
)
KV_BYTES = 2 * 10 * 2 * 64 * 2  # 5120 bytes per token
ATTN_FLOPS_PER_PAIR = 4 * 10 * 8 * 64  # 20480


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Two threads on a shared 2-core box slow the real executor's tiny steps by ~30x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def plan_of(contexts: list[int], new_tokens: list[int]) -> StepPlan:
    plan = StepPlan()
    for i, (c, n) in enumerate(zip(contexts, new_tokens)):
        seq = Sequence(f"s{i}", list(range(c + n)), c + n, 1, scripted_output_ids=(7,))
        plan.scheduled.append(ScheduledSeq(seq, c, n))
    return plan


# ------------------------------------------------------------------------------ cost model


def test_prefill_is_compute_bound():
    model = RooflineCostModel(HardwareConfig(**HAND))
    cost = model.cost(StepShape.of([0], [4000]))
    flops = 2 * 1e9 * 4000 + ATTN_FLOPS_PER_PAIR * 4000 * 2000
    assert cost.compute_s == pytest.approx(flops / 5e14)
    assert cost.memory_s == pytest.approx((2e9 + KV_BYTES * 4000) / 5e11)
    assert cost.compute_s > cost.memory_s
    assert model.step_time_s(plan_of([0], [4000])) == pytest.approx(flops / 5e14 + 1e-3)


def test_decode_is_bandwidth_bound():
    model = RooflineCostModel(HardwareConfig(**HAND))
    plan = plan_of([1000] * 8, [1] * 8)
    cost = model.cost(StepShape.of_plan(plan))
    assert cost.memory_s == pytest.approx((2e9 + KV_BYTES * 8 * 1001) / 5e11)
    assert cost.compute_s == pytest.approx((2 * 1e9 * 8 + ATTN_FLOPS_PER_PAIR * 8 * 1000.5) / 5e14)
    assert cost.memory_s > cost.compute_s
    assert model.step_time_s(plan) == pytest.approx(cost.memory_s + 1e-3)


def test_attention_cost_grows_with_context():
    model = RooflineCostModel(HardwareConfig(**HAND))
    short = model.cost(StepShape.of([0], [512])).compute_s
    long = model.cost(StepShape.of([30000], [512])).compute_s
    assert long - short == pytest.approx(ATTN_FLOPS_PER_PAIR * 512 * 30000 / 5e14)
    decode_short = model.cost(StepShape.of([100] * 4, [1] * 4)).memory_s
    decode_long = model.cost(StepShape.of([10000] * 4, [1] * 4)).memory_s
    assert decode_long - decode_short == pytest.approx(KV_BYTES * 4 * 9900 / 5e11)


def test_tensor_parallel_scales_compute_and_adds_allreduces():
    one = RooflineCostModel(HardwareConfig(**HAND))
    tp = RooflineCostModel(
        HardwareConfig(
            **{**HAND, "num_gpus": 4, "interconnect_bandwidth": 1e11, "allreduce_latency_s": 1e-5}
        )
    )
    shape = StepShape.of([0], [4000])
    assert tp.cost(shape).compute_s == pytest.approx(one.cost(shape).compute_s / 4)
    ring_s = 2 * 3 / 4 * 4000 * 512 * 2.0 / 1e11
    assert tp.cost(shape).comm_s == pytest.approx(2 * 10 * (1e-5 + ring_s))


def test_kv_bytes_and_capacity_from_model_shape():
    hw = HardwareConfig(**{**HAND, "gpu_memory_bytes": 10e9, "memory_fraction": 0.5})
    assert hw.kv_bytes_per_token == KV_BYTES
    assert hw.kv_capacity_tokens() == int((10e9 * 0.5 - 2e9) // KV_BYTES)


def test_fitted_model_is_the_linear_form_with_a_knee():
    hw = HardwareConfig(
        name="fit",
        kind="fitted",
        step_overhead_s=0.01,
        fit_per_token_s=1e-4,
        fit_per_attention_pair_s=1e-8,
        fit_per_prefill_seq_s=2e-3,
        fit_per_decode_seq_s=5e-4,
        fit_per_kv_token_s=1e-6,
        fit_per_kv_block_s=2e-6,
        fit_cache_kv_tokens=1000,
        fit_per_kv_token_beyond_cache_s=3e-6,
    )
    # one extend (context 900, 100 new) + two decodes (context 400), blocks of 16
    plan = plan_of([900, 400, 400], [100, 1, 1])
    pairs = 100 * (900 + 50) + 2 * (400 + 0.5)
    kv = 1000 + 401 + 401
    blocks = 63 + 26 + 26  # ceil(1000 / 16) + 2 * ceil(401 / 16)
    expected = (
        0.01
        + 1e-4 * 102
        + 1e-8 * pairs
        + 2e-3
        + 2 * 5e-4
        + 1e-6 * kv
        + 2e-6 * blocks
        + 3e-6 * (kv - 1000)
    )
    assert FittedCostModel(hw, block_size=16).step_time_s(plan) == pytest.approx(expected)
    # page size 1 reads one block-table entry per token
    page1 = expected + 2e-6 * (kv - blocks)
    assert FittedCostModel(hw, block_size=1).step_time_s(plan) == pytest.approx(page1)


def test_unknown_kind_lists_the_valid_ones():
    with pytest.raises(UnknownNameError, match="fitted, roofline"):
        build_cost_model(HardwareConfig(**{**HAND, "kind": "magic"}))


def test_roofline_refuses_a_missing_constant():
    with pytest.raises(ValueError, match="hardware.peak_flops"):
        build_cost_model(HardwareConfig(**{**HAND, "peak_flops": None}))


@pytest.mark.parametrize("path", sorted((CONF / "hardware").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_preset_composes_and_prices_a_step(path):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.config.schema import register_configs

    register_configs()  # the hardware/base_hardware schema the presets start from
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        hw = OmegaConf.to_object(compose(f"hardware/{path.stem}")["hardware"])
    assert isinstance(hw, HardwareConfig) and hw.name == path.stem
    model = build_cost_model(hw)
    prefill = model.step_time_s(plan_of([0], [2048]))
    decode = model.step_time_s(plan_of([2048] * 8, [1] * 8))
    assert prefill > 0 and decode > 0
    if hw.kind == "roofline":
        assert hw.kv_capacity_tokens() > 100_000  # TP degrees leave room for real KV


# ------------------------------------------------------------------------------ executor

TINY_VOCAB = 1024


def engine(cache: str, executor: str, hardware: HardwareConfig | None = None, **overrides):
    fields: dict[str, Any] = dict(
        cache=cache,
        block_size=16 if cache == "apc" else 1,
        kv_capacity_tokens=4096,
        max_num_batched_tokens=512,
        backend="torch",
    )
    fields.update(overrides)
    options = {"hardware": hardware} if executor == "simulated" else {}
    return build_engine(
        EngineConfig(**fields), get_preset("tiny"), executor=executor, device="cpu", **options
    )


def shared_prompt(seed=0, groups=3, per_group=4, system_len=90, question_len=13, output_len=6):
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        system = rng.integers(1, TINY_VOCAB, system_len).tolist()
        for i in range(per_group):
            question = rng.integers(1, TINY_VOCAB, question_len).tolist()
            out.append(
                GenerationRequest(
                    request_id=f"g{g}q{i}",
                    prompt_ids=tuple(system + question),
                    max_new_tokens=output_len,
                    scripted_output_ids=tuple(rng.integers(1, TINY_VOCAB, output_len).tolist()),
                )
            )
    return out


def multiturn(seed=0, users=3, rounds=4, system_len=40, question_len=11, answer_len=7):
    """Round r of a user extends round r-1's prompt and reply; released when r-1 finishes."""
    rng = np.random.default_rng(seed)
    system = rng.integers(1, TINY_VOCAB, system_len).tolist()
    out = []
    for u in range(users):
        history = list(system)
        for r in range(rounds):
            history += rng.integers(1, TINY_VOCAB, question_len).tolist()
            answer = tuple(rng.integers(1, TINY_VOCAB, answer_len).tolist())
            out.append(
                Request(
                    request_id=f"u{u}r{r}",
                    prompt_ids=tuple(history),
                    output_ids=answer,
                    after=f"u{u}r{r - 1}" if r else None,
                )
            )
            history += answer
    return out


OVERHEAD_ONLY = HardwareConfig(name="ticks", kind="fitted", step_overhead_s=0.01)


def test_virtual_clock_counts_steps_and_tokens_follow_the_script():
    req = shared_prompt(groups=1, per_group=1, system_len=27, question_len=13, output_len=5)[0]
    eng = engine("apc", "simulated", OVERHEAD_ONLY)
    (record,) = run_batch(eng, [req])
    # 40-token prompt in one step (budget 512), then 4 decode steps: 5 steps of 10 ms.
    assert record.output_ids == req.scripted_output_ids
    assert record.first_token_s == pytest.approx(0.01)
    assert tuple(record.token_times_s) == pytest.approx((0.01, 0.02, 0.03, 0.04, 0.05))
    assert eng.clock.now() == pytest.approx(0.05)
    assert eng.executor.num_steps == eng.loop.num_steps == 5
    assert eng.loop.bookkeeping_ns > 0  # admission is still timed on the wall clock


def test_virtual_clock_jumps_to_arrivals():
    reqs = shared_prompt(groups=1, per_group=2, system_len=27, question_len=13, output_len=2)
    late = GenerationRequest(**{**reqs[1].__dict__, "arrival_s": 5.0})
    records = {
        r.request_id: r
        for r in run_batch(engine("radix", "simulated", OVERHEAD_ONLY), [reqs[0], late])
    }
    assert records["g0q0"].finish_s == pytest.approx(0.02)
    assert records["g0q1"].first_token_s == pytest.approx(5.01)


def test_greedy_decoding_is_refused():
    req = GenerationRequest(request_id="x", prompt_ids=(1, 2, 3), max_new_tokens=2)
    with pytest.raises(ValueError, match="no scripted output"):
        run_batch(engine("apc", "simulated", OVERHEAD_ONLY), [req])


def test_missing_hardware_names_the_override():
    with pytest.raises(ValueError, match="hardware="):
        engine("apc", "simulated", None)


def test_no_kv_tensors_are_allocated():
    # A real pool of this size would take 2 GiB for the tiny model.
    eng = engine("radix", "simulated", OVERHEAD_ONLY, kv_capacity_tokens=1 << 22)
    assert not hasattr(eng.executor, "kv_pool")
    assert eng.cache.capacity_tokens == 1 << 22


def _outcomes(cache, executor, requests, **overrides):
    hardware = OVERHEAD_ONLY if executor == "simulated" else None
    sent = [r if isinstance(r, Request) else as_workload([r])[0] for r in requests]
    records = drive(engine(cache, executor, hardware, **overrides), sent)
    return {
        r.request_id: (r.cached_tokens, r.num_preemptions, r.recomputed_tokens, r.output_ids)
        for r in records
    }


@pytest.mark.parametrize("cache", ["apc", "radix"])
@pytest.mark.parametrize("workload", [shared_prompt, multiturn])
def test_hits_identical_between_real_and_simulated(cache, workload):
    requests = workload()
    real = _outcomes(cache, "real", requests)
    simulated = _outcomes(cache, "simulated", requests)
    assert simulated == real
    assert sum(hits for hits, *_ in real.values()) > 0


@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_capacity_is_enforced_identically(cache):
    """Six 12-token prompts with 50-token replies outgrow 112 KV tokens: admission (APC allocates
    as it goes, radix reserves 0.7 of the reply) lets in more than fits at the end, so both preempt."""
    requests = shared_prompt(
        seed=1, groups=6, per_group=1, system_len=8, question_len=4, output_len=50
    )
    real = _outcomes(cache, "real", requests, kv_capacity_tokens=112)
    simulated = _outcomes(cache, "simulated", requests, kv_capacity_tokens=112)
    assert simulated == real
    assert sum(preempted for _, preempted, *_ in real.values()) > 0


# ------------------------------------------------------------------------------ calibration


def test_fit_recovers_known_coefficients():
    from engines.simulate.calibrate import GridPoint, Measurement, default_grid, fit

    truth = HardwareConfig(
        name="truth",
        kind="fitted",
        step_overhead_s=0.008,
        fit_per_token_s=8e-5,
        fit_per_attention_pair_s=7e-8,
        fit_per_decode_seq_s=3e-4,
        fit_per_kv_token_s=6e-7,
        fit_per_kv_block_s=4e-7,
        fit_cache_kv_tokens=32768,
        fit_per_kv_token_beyond_cache_s=2e-6,
    )
    measurements = []
    for point in default_grid():
        contexts, news = point.shape_lists()
        shape = StepShape.of(contexts, news, point.block_size)
        t = FittedCostModel(truth).shape_time_s(shape)
        measurements.append(Measurement(point, shape, t, (t,)))
    result = fit(measurements)
    assert result.cache_kv_tokens == 32768
    assert result.r2 == pytest.approx(1.0)
    assert result.max_abs_rel_error < 1e-6
    for name in (
        "step_overhead_s",
        "fit_per_token_s",
        "fit_per_kv_block_s",
        "fit_per_kv_token_beyond_cache_s",
    ):
        assert result.coefficients[name] == pytest.approx(getattr(truth, name), rel=1e-6)
    assert result.coefficients["fit_per_prefill_seq_s"] == pytest.approx(0.0, abs=1e-12)
    assert isinstance(measurements[0].point, GridPoint)


def test_measure_times_the_real_executor_path():
    from engines.simulate.calibrate import GridPoint, measure

    grid = [GridPoint("prefill", 24, 40, 2), GridPoint("decode", 1, 30, 3, block_size=1)]
    measurements = measure(get_preset("tiny"), grid, repeats=2)
    assert [m.shape.num_new_tokens for m in measurements] == [48, 3]
    assert measurements[1].shape.num_kv_blocks == 3 * 31  # page size 1: one entry per token
    assert all(len(m.times_s) == 2 and m.median_s > 0 for m in measurements)


def test_host_time_is_charged_only_when_asked():
    req = shared_prompt(groups=1, per_group=1, system_len=27, question_len=13, output_len=5)[0]
    charged = HardwareConfig(
        name="ticks", kind="fitted", step_overhead_s=0.01, charge_host_time=True
    )
    eng = engine("apc", "simulated", charged)
    (record,) = run_batch(eng, [req])
    host_s = eng.executor.host_s
    assert host_s > 0  # the scheduler's CPU time between steps
    assert eng.clock.now() == pytest.approx(0.05 + host_s)
    assert record.output_ids == req.scripted_output_ids
    plain = engine("apc", "simulated", OVERHEAD_ONLY)
    run_batch(plain, [req])
    assert plain.executor.host_s == 0 and plain.clock.now() == pytest.approx(0.05)
