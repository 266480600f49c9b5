"""Decode runs (engines/sched/base.py `DecodeRun`): the simulated executor's macro-steps over pure
decode give exactly what stepping one by one gives.

Engine level: every simulated pin case (both upstream pairings, tight KV with preemptions and
retractions, page 16, sync scheduling, lpm) and the two cross pairings run with engine.decode_runs
on and off; per-request outcomes, every token time bit for bit, outputs, the cache's counters and
the step count must be equal, and runs must really have happened where the design allows them.
Cache level: a run's allocations equal the same steps done one `allocate` call at a time (blocks,
free-queue order, cached keys, evictions, slots).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.batch import run_batch
from engines.build import build_engine
from engines.config import EngineConfig
from engines.simulate.cost_model import StepShape, build_cost_model
from engines.simulate.executor import SimulatedExecutor, decode_run_shape
from harness.client.inprocess import drive
from harness.config.schema import CONF_DIR
from tests.engine_util import (
    ENGINE_PRESETS,
    as_workload,
    hardware_preset,
    shared_prompt_requests,
    tiny_model,
)
from tests.pin_support import CASES, SIM, run_overrides
from tests.unit.test_engine_fuzz import build_requests, pressure, streams


def simulated_engine(config: EngineConfig):
    """A tiny-model engine on the simulated executor priced as H100 / Llama-3.1-8B."""
    hardware = hardware_preset("h100_llama3_8b_bf16")
    return build_engine(config, tiny_model(), executor="simulated", device="cpu", hardware=hardware)


CROSS = {
    f"{engine}-{name}": (f"engine={engine}", *overrides, *SIM)
    for engine in ("apc_sglang", "radix_vllm")
    for name, overrides in {
        "multiturn": ("workload=multiturn",),
        "fewshot-tight": ("workload=fewshot", "engine.kv_capacity_tokens=1024"),
    }.items()
}
# The fitted CPU model, with host time not charged (charging it measures every step: no runs).
FITTED = ("executor=simulated", "hardware=cpu_measured", "hardware.charge_host_time=false")
ENGINE_CASES = {
    **{
        name: case.overrides
        for name, case in CASES.items()
        if "hardware" in " ".join(case.overrides)
    },
    **CROSS,
    **{
        f"{engine}-multiturn-fitted": (f"engine={engine}", "workload=multiturn", *FITTED)
        for engine in ("apc", "radix")
    },
}


@pytest.fixture
def run_counter(monkeypatch):
    calls = []
    real = SimulatedExecutor.execute_decode_run

    def counted(self, run, until_s):
        result = real(self, run, until_s)
        calls.append(len(result.end_times_s))
        return result

    monkeypatch.setattr(SimulatedExecutor, "execute_decode_run", counted)
    return calls


def _outcomes(overrides: tuple[str, ...]) -> tuple[dict, dict]:
    run, records = run_overrides(overrides)
    rows = {
        r.request_id: (
            r.cached_tokens,
            r.num_preemptions,
            r.recomputed_tokens,
            r.scheduled_s,
            r.first_token_s,
            r.finish_s,
            tuple(r.token_times_s),
            r.output_ids,
        )
        for r in records
    }
    return run, rows


@pytest.mark.parametrize("name", sorted(ENGINE_CASES))
def test_decode_runs_equal_step_by_step(name, run_counter):
    overrides = ENGINE_CASES[name]
    step_run, step_rows = _outcomes((*overrides, "engine.decode_runs=false"))
    assert run_counter == []
    macro_run, macro_rows = _outcomes((*overrides, "engine.decode_runs=true"))
    assert macro_run == step_run
    assert macro_rows.keys() == step_rows.keys()
    changed = [rid for rid in step_rows if macro_rows[rid] != step_rows[rid]]
    assert not changed, f"{len(changed)} requests differ, first {changed[0]}"
    if "radix_vllm" in name:  # the tree is committed after every step: no runs by design
        assert run_counter == []
    else:
        assert run_counter and max(run_counter) >= 2
        assert sum(run_counter) < step_run["num_steps"]


@pytest.mark.parametrize("cap", [1, 2, 4])
@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_decode_runs_under_a_concurrency_cap(cache, cap, run_counter):
    """A request held back by load.max_concurrency is sent at the finish that frees a slot; runs
    never contain a finish, so they see the same sends."""
    base = shared_prompt_requests(groups=2, per_group=4, output_len=30, scripted=True)
    requests = [dataclasses.replace(r, arrival_s=0.05 * i) for i, r in enumerate(base)]

    def records(runs: bool) -> list[tuple]:
        config = EngineConfig(**ENGINE_PRESETS[cache], kv_capacity_tokens=4096, decode_runs=runs)
        engine = simulated_engine(config)
        out = drive(engine, as_workload(requests), max_concurrency=cap)
        return sorted(
            (r.request_id, r.arrival_s, r.cached_tokens, tuple(r.token_times_s)) for r in out
        )

    assert records(True) == records(False)
    assert run_counter


# ---------------------------------------------------------------- pricing


@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize(
    "hardware", ["h100_llama3_70b_fp8", "h200_llama3_8b_bf16", "cpu_measured", "knee"]
)
def test_run_prices_equal_step_prices(hardware, block_size):
    """Every step of a run is priced bit for bit as `shape_time_s` prices that step's plan shape
    (contexts past the fitted model's cache knee included)."""
    hw = hardware_preset(hardware.replace("knee", "cpu_measured"))
    if hardware == "knee":  # the fitted model with a cache knee the runs cross
        hw = dataclasses.replace(
            hw, fit_cache_kv_tokens=900_000, fit_per_kv_token_beyond_cache_s=3e-10
        )
    model = build_cost_model(hw, block_size)
    rng = np.random.default_rng(block_size)
    contexts = rng.integers(0, 200_000, 9)
    steps = np.arange(40, 340)
    times = model.run_times_s(decode_run_shape(contexts, steps, block_size))
    for i, s in enumerate(steps.tolist()):
        shape = StepShape.of_pairs(((int(c) + s, 1) for c in contexts), block_size)
        assert times[i] == model.shape_time_s(shape), (hardware, s)


# ---------------------------------------------------------------- random streams

RUN_FUZZ = settings(
    max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@RUN_FUZZ
@given(
    stream=streams,
    pool=pressure,
    arm=st.sampled_from(["apc", "radix", "apc_sglang"]),
    block_size=st.sampled_from([1, 4, 16]),
    policy=st.sampled_from(["fcfs", "lpm"]),
    spacing_s=st.sampled_from([0.0, 0.02]),
)
def test_random_streams_with_and_without_runs(stream, pool, arm, block_size, policy, spacing_s):
    """Random prompts sharing prefixes, tenant salts, n > 1 siblings, pools that force preemption
    or retraction and small step budgets (tests/unit/test_engine_fuzz.py's strategies), arriving at
    once or spaced: the same records with decode runs as without, and the integrity check holds
    after every step and run."""
    rng = np.random.default_rng(stream[0])
    requests = [
        dataclasses.replace(
            r,
            arrival_s=spacing_s * i,
            scripted_output_ids=tuple(rng.integers(1, 1024, r.max_new_tokens + 24).tolist()),
            max_new_tokens=r.max_new_tokens + 24,  # long enough replies for runs to form
        )
        for i, r in enumerate(build_requests(stream))
    ]
    capacity, budget = pool
    cache, scheduler = {
        "apc": ("apc", None),
        "radix": ("radix", None),
        "apc_sglang": ("apc", "sglang"),
    }[arm]
    capacity = -(-(capacity + 24 + 2 * block_size) // block_size) * block_size  # fits the longest

    def records(runs: bool) -> list[tuple]:
        config = EngineConfig(
            cache=cache,
            scheduler=scheduler,
            block_size=block_size,
            kv_capacity_tokens=capacity,
            max_num_batched_tokens=budget,
            policy=policy,
            debug_checks=True,
            decode_runs=runs,
        )
        engine = simulated_engine(config)
        out = run_batch(engine, requests)
        stats = engine.cache.stats()
        rows = sorted(
            (
                r.request_id,
                r.cached_tokens,
                r.num_preemptions,
                r.recomputed_tokens,
                tuple(r.token_times_s),
            )
            for r in out
        )
        return [rows, stats.num_evictions, engine.loop.num_steps]

    assert records(True) == records(False)


def test_overhead_measurements_step_one_by_one():
    """What measures the host's bookkeeping (harness.run.overhead, the claims on it, the overhead_sim
    suite) must not replay decode stretches in bulk."""
    from harness.run import overhead

    cfg = overhead.config("apc", True, ["executor=simulated", "hardware=h100_llama3_8b_bf16"])
    assert cfg.engine.decode_runs is False
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        suite = compose("config", overrides=["+suite=overhead_sim"])
    assert suite.engine.decode_runs is False
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        assert compose("config").engine.decode_runs is True  # the default elsewhere
