"""Scheduler and cache as two axes: every pairing runs, keeps outputs, balances its accounting, and
the same cache reuses the same tokens under both schedulers one request at a time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.batch import run_batch
from engines.build import build_engine
from engines.cache.records import CacheIntegrityError
from engines.config import DESIGN_KNOBS, EngineConfig
from engines.sequence import Sequence
from harness.config.preflight import preflight
from tests.engine_util import by_id, shared_prompt_requests, tiny_model
from tests.pin_support import SIM, run_overrides
from tests.unit.test_engine_fuzz import (
    FUZZ,
    build_requests,
    outputs_and_idle_check,
    pressure,
    reference,
    streams,
)

ARMS = [("apc", "vllm"), ("apc", "sglang"), ("radix", "vllm"), ("radix", "sglang")]
GRANULARITY = {"apc": 16, "radix": 1}
WORKLOADS = [
    "system_prompt",
    "fewshot",
    "multiturn",
    "parallel",
    "rag",
    "rag_question_first",
    "unique",
    "dataset_sharegpt",
]


def engine_for(cache: str, scheduler: str, **overrides: Any):
    fields: dict[str, Any] = dict(
        cache=cache,
        scheduler=scheduler,
        block_size=GRANULARITY[cache],
        kv_capacity_tokens=4096,
        max_num_batched_tokens=512,
        backend="torch",
        debug_checks=True,
    )
    fields.update(overrides)
    return build_engine(EngineConfig(**fields), tiny_model(), executor="real", device="cpu")


@pytest.mark.parametrize("cache,scheduler", ARMS)
def test_greedy_outputs_equal_caching_off(cache, scheduler):
    requests = shared_prompt_requests(system_len=40, question_len=9, output_len=4)
    # Two at a time: in one burst SGLang's scheduler admits everything before anything is cached.
    on = by_id(run_batch(engine_for(cache, scheduler, max_num_seqs=2), requests))
    off = by_id(
        run_batch(engine_for(cache, scheduler, max_num_seqs=2, prefix_caching=False), requests)
    )
    assert {k: r.output_ids for k, r in on.items()} == {k: r.output_ids for k, r in off.items()}
    assert sum(r.cached_tokens for r in on.values()) > 0
    assert all(r.cached_tokens == 0 for r in off.values())


@pytest.mark.parametrize(
    "workload", ["system_prompt", "multiturn", "parallel", "fewshot", "rag", "dataset_sharegpt"]
)
@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_one_at_a_time_the_cache_alone_decides_the_hits(cache, workload):
    """max_num_seqs=1 removes every scheduling decision but the order, which is FCFS in both.
    SGLang's front stage is off: its n > 1 prefix request is a front-stage difference, not the
    scheduler's (tests/unit/test_frontend.py)."""
    cached = {}
    for scheduler in ("vllm", "sglang"):
        front = ("engine.sglang_frontend=false",) if scheduler == "sglang" else ()
        _, records = run_overrides(
            (
                f"engine={cache}",
                f"engine.scheduler={scheduler}",
                f"workload={workload}",
                "engine.max_num_seqs=1",
                *front,
                *SIM,
            )
        )
        cached[scheduler] = {r.request_id: r.cached_tokens for r in records}
    assert cached["vllm"] == cached["sglang"]
    assert sum(cached["vllm"].values()) > 0


@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("arm", ["apc_sglang", "radix_vllm"])
def test_cross_arms_run_every_workload_with_balanced_accounting(arm, workload):
    run, records = run_overrides(
        (f"engine={arm}", f"workload={workload}", "engine.debug_checks=true", *SIM)
    )
    assert records and all(r.output_tokens > 0 for r in records)
    assert run["queries"] > 0


@pytest.mark.parametrize("policy", ["lpm", "dfs-weight"])
@pytest.mark.parametrize("arm", ["apc_sglang", "radix_vllm"])
def test_cache_aware_policies_run_under_the_cross_arms(arm, policy):
    """One implementation per policy name serves every pairing."""
    base = (f"engine={arm}", "workload=system_prompt", "engine.debug_checks=true", *SIM)
    _, fcfs = run_overrides(base)
    _, ordered = run_overrides((*base, f"engine.policy={policy}"))
    assert len(ordered) == len(fcfs) and sum(r.cached_tokens for r in ordered) > 0


@pytest.mark.parametrize("cache,scheduler", ARMS)
def test_tight_kv_preempts_or_retracts_and_recovers(cache, scheduler):
    overrides = (
        f"engine={cache}",
        f"engine.scheduler={scheduler}",
        "workload=unique",
        "workload.num_prompts=16",
        "workload.prompt_len=48",
        "workload.output_len=96",
        "engine.kv_capacity_tokens=512",
        "engine.debug_checks=true",
        *SIM,
    )
    _, records = run_overrides(overrides)
    assert len(records) == 16 and sum(r.num_preemptions for r in records) > 0
    assert all(r.output_tokens == 96 for r in records)


def test_cross_arm_presets_name_their_designs():
    from tests.pin_support import compose_run

    for preset, cache, scheduler in [
        ("apc", "apc", "vllm"),
        ("radix", "radix", "sglang"),
        ("apc_sglang", "apc", "sglang"),
        ("radix_vllm", "radix", "vllm"),
    ]:
        engine = compose_run((f"engine={preset}", "workload=unique")).engine
        assert (engine.cache, engine.scheduler_design) == (cache, scheduler)


def test_default_scheduler_is_the_caches_upstream_one():
    assert EngineConfig(cache="apc").scheduler_design == "vllm"
    assert EngineConfig(cache="radix").scheduler_design == "sglang"


@pytest.mark.parametrize(
    "cache,scheduler,knob,value,design",
    [
        ("radix", "sglang", "hash_algo", "xxhash", "apc"),
        ("radix", "vllm", "free_order", "classic", "apc"),
        ("apc", "vllm", "eviction_policy", "lfu", "radix"),
        ("apc", "sglang", "async_scheduling", False, "vllm"),
        ("radix", "sglang", "stats_timing", "lookup", "vllm"),
        ("apc", "vllm", "max_prefill_tokens", 8, "sglang"),
        ("radix", "vllm", "schedule_conservativeness", 0.5, "sglang"),
    ],
)
def test_a_knob_of_a_design_not_in_use_is_refused(cache, scheduler, knob, value, design):
    cfg = EngineConfig(
        cache=cache, scheduler=scheduler, block_size=GRANULARITY[cache], **{knob: value}
    )
    with pytest.raises(ValueError, match=rf"engine\.{knob} is a knob of the {design} design"):
        cfg.validate()


def test_unknown_designs_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="engine.scheduler must be one of"):
        EngineConfig(scheduler="tgi").validate()
    with pytest.raises(ValueError, match="engine.cache must be one of"):
        EngineConfig(cache="lru").validate()


def test_bad_knob_on_the_command_line_is_one_line():
    line = preflight(["engine=radix", "engine.hash_algo=xxhash"])
    assert line is not None and "\n" not in line
    assert "hash_algo" in line and "apc design" in line and "cache radix" in line


def test_policy_profile_lists_only_the_chosen_designs_knobs():
    profile = EngineConfig(cache="radix", scheduler="vllm", block_size=1).design_knobs()
    assert set(DESIGN_KNOBS["radix"]) | set(DESIGN_KNOBS["vllm"]) <= set(profile)
    assert not (set(DESIGN_KNOBS["apc"]) | set(DESIGN_KNOBS["sglang"])) & set(profile)
    assert (profile["cache"], profile["scheduler"]) == ("radix", "vllm")


@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_a_lock_nobody_holds_breaks_integrity_until_unlocked(cache):
    engine = engine_for(cache, "vllm")
    run_batch(engine, shared_prompt_requests(output_len=2))
    req = shared_prompt_requests(output_len=2)[0]
    seq = Sequence(req.request_id, list(req.prompt_ids), len(req.prompt_ids), 2)
    match = engine.cache.match(seq, capped=False)
    assert match.num_tokens >= 32
    held = engine.cache.lock(match)
    assert engine.cache.usage().protected >= match.num_tokens
    with pytest.raises(CacheIntegrityError):
        engine.cache.check_integrity()
    engine.cache.unlock(held)
    engine.cache.check_integrity()
    assert engine.cache.usage().protected == 0


@FUZZ
@given(
    stream=streams,
    pool=pressure,
    arm=st.sampled_from(
        [("apc", "sglang", 16), ("apc", "sglang", 4), ("radix", "vllm", 1), ("radix", "vllm", 4)]
    ),
    policy=st.sampled_from(["fcfs", "lpm", "dfs-weight"]),
)
def test_cross_arm_random_streams(stream, pool, arm, policy):
    """The engine fuzz for the cross arms: preemption, chunking, salts and siblings; integrity
    after every step, nothing held at idle, greedy outputs of a cache-off run."""
    cache, scheduler, granularity = arm
    requests = build_requests(stream)
    capacity, budget = pool
    got = outputs_and_idle_check(
        cache,
        requests,
        scheduler=scheduler,
        block_size=granularity,
        kv_capacity_tokens=capacity,
        max_num_batched_tokens=budget,
        policy=policy,
    )
    assert got == reference(cache, requests, granularity)
