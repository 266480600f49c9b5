"""Theoretical hit rates: docs/benchmarking.md §3 closed forms, Belady/LRU against the ideal."""

from __future__ import annotations

import numpy as np
import pytest

from tests.workload_util import SPACE, params
from workloads.base import generate
from workloads.bounds import (
    Replay,
    capped_hit_rate,
    ideal_hit_rate,
    run_bounds,
    shared_prefix_lens,
    simulate,
)
from workloads.registry import UnknownNameError


def test_parallel_sampling_spec_numbers():
    # §3.4: P = 100, n = 4: APC (g = 16) 3*96/400 = 0.72 (queries 400, hits 288); page-1 radix 0.7425
    reqs = generate(params("parallel", prompt_len=100, n=4, num_prompts=1), 0, SPACE)
    ideal = ideal_hit_rate(reqs, (1, 16))
    assert ideal.bounds[16].prompt_tokens == 400 and ideal.bounds[16].hit_tokens == 288
    assert ideal.by_granularity[16] == pytest.approx(0.72)
    assert ideal.by_granularity[1] == pytest.approx(0.7425)
    many = ideal_hit_rate(
        generate(params("parallel", prompt_len=100, n=4, num_prompts=10), 0, SPACE), (1, 16)
    )
    assert many.by_granularity == pytest.approx({1: 0.7425, 16: 0.72})


@pytest.mark.parametrize("g", [1, 7, 16, 64])
def test_shared_prompt_closed_form(g):
    # §3.1: (P-1) * g*floor(S/g) / (P*(S+Q)); S = 40 is not block aligned
    S, Q, G, P = 40, 8, 3, 4
    reqs = generate(
        params(
            "system_prompt", system_prompt_len=S, question_len=Q, num_groups=G, prompts_per_group=P
        ),
        0,
        SPACE,
    )
    expect = (P - 1) * g * (S // g) / (P * (S + Q))
    assert ideal_hit_rate(reqs, (g,)).by_granularity[g] == pytest.approx(expect)


def test_gsp_defaults_closed_form():
    # §3.1 GSP defaults: 15*2048 / (16*2176) ~= 0.882 for g = 1 and g = 16 alike (8 groups suffice)
    reqs = generate(
        params(
            "system_prompt",
            num_groups=8,
            prompts_per_group=16,
            system_prompt_len=2048,
            question_len=128,
        ),
        0,
        SPACE,
    )
    rates = ideal_hit_rate(reqs, (1, 16)).by_granularity
    assert rates[1] == pytest.approx(15 * 2048 / (16 * 2176)) and rates[16] == pytest.approx(
        rates[1]
    )
    assert round(rates[1], 3) == 0.882


@pytest.mark.parametrize("g", [1, 16])
def test_fewshot_fixed_closed_form(g):
    # §3.2: (R-1)/R * g*floor(F/g) / (F + Q), F = instruction + k*shot
    instr, k, L, Q, R = 6, 3, 10, 5, 4
    reqs = generate(
        params(
            "fewshot",
            instruction_len=instr,
            k_shots=k,
            shot_len=L,
            question_len=Q,
            questions_per_task=R,
        ),
        0,
        SPACE,
    )
    F = instr + k * L
    assert ideal_hit_rate(reqs, (g,)).by_granularity[g] == pytest.approx(
        (R - 1) / R * g * (F // g) / (F + Q)
    )


@pytest.mark.parametrize("g", [1, 4, 16])
def test_multiturn_closed_form(g):
    # §3.3: turn r reuses g*floor((T_{r-1} - 1)/g); round 1 reuses the system prompt after user 0
    p = params("multiturn")
    reqs = generate(p, 0, SPACE)
    by_id = {r.request_id: r for r in reqs}
    expect = 0
    for r in reqs:
        if r.after is None:
            expect += g * (p.system_prompt_len // g) if r.session_id != "u0" else 0
        else:
            prev = by_id[r.after]
            expect += g * ((len(prev.prompt_ids) + prev.output_len - 1) // g)
    bound = ideal_hit_rate(reqs, (g,)).bounds[g]
    assert bound.hit_tokens == expect


@pytest.mark.parametrize("family", ["unique", "rag_question_first"])
def test_zero_hit_workloads(family):
    reqs = generate(
        params("rag", layout="question_first")
        if family == "rag_question_first"
        else params(family),
        0,
        SPACE,
    )
    assert ideal_hit_rate(reqs, (1, 16)).by_granularity == {1: 0.0, 16: 0.0}


@pytest.mark.parametrize(
    "family", ["system_prompt", "fewshot", "multiturn", "parallel", "rag", "unique", "trace"]
)
def test_ground_truth_matches_the_token_level_ideal(family):
    reqs = generate(params(family), 0, SPACE)
    bound = ideal_hit_rate(reqs, (1,)).bounds[1]
    assert list(bound.hit_tokens_per_request) == [
        min(r.shared_prefix_len, len(r.prompt_ids) - 1) for r in reqs
    ]
    assert shared_prefix_lens(reqs) == [r.shared_prefix_len for r in reqs]


@pytest.mark.parametrize(
    "family,overrides",
    [
        ("system_prompt", {}),
        ("multiturn", {}),
        ("rag", dict(doc_popularity="zipf")),
        ("fewshot", dict(order_policy="shuffled", pool_size=4)),
    ],
)
@pytest.mark.parametrize("g", [1, 4])
def test_capped_policies_never_beat_the_ideal_and_match_it_when_large(family, overrides, g):
    reqs = generate(params(family, **overrides), 0, SPACE)
    ideal = ideal_hit_rate(reqs, (g,)).bounds[g]
    total_blocks = sum(-(-len(r.prompt_ids + r.output_ids) // g) * r.n for r in reqs)
    for policy in ("belady", "lru"):
        bounds = simulate(reqs, g, [2, 8, 32, total_blocks], policy=policy)
        assert all(b.hit_tokens <= ideal.hit_tokens for b in bounds)
        assert bounds[-1].hit_tokens == ideal.hit_tokens
        assert bounds[-1].hit_tokens_per_request == ideal.hit_tokens_per_request


def _rep(*ids: int) -> Replay:
    arr = np.asarray(ids, dtype=np.int64)
    return Replay(arr, arr)


def test_belady_keeps_what_is_used_next_where_lru_thrashes():
    # g = 4, 5-token prompts (one hittable block each), cyclic A B C A B C, room for 2 blocks
    a, b, c = _rep(1, 2, 3, 4, 9), _rep(5, 6, 7, 8, 9), _rep(10, 11, 12, 13, 9)
    seq = [a, b, c, a, b, c]
    assert capped_hit_rate(seq, 4, 2, policy="lru").hit_tokens == 0
    belady = capped_hit_rate(seq, 4, 2, policy="belady")
    assert belady.hit_tokens == 8 and belady.hit_blocks == 2
    assert ideal_hit_rate(seq, (4,)).bounds[4].hit_tokens == 12


def test_engine_and_trace_accounting():
    # a 10-token prompt sent twice at g = 4: engine reuses 4*floor(9/4) = 8; trace counts all 3 blocks
    p = _rep(*range(10))
    engine = ideal_hit_rate([p, p], (4,)).bounds[4]
    trace = ideal_hit_rate([p, p], (4,), accounting="trace").bounds[4]
    assert (engine.hit_tokens, engine.prompt_tokens) == (8, 20)
    assert (trace.hit_tokens, trace.hit_blocks, trace.total_blocks) == (10, 3, 6)
    # a partial last block hits in trace accounting only if that exact partial prefix was cached
    longer = _rep(*range(11))
    assert ideal_hit_rate([p, longer], (4,), accounting="trace").bounds[4].hit_tokens == 8


def test_salt_isolates_tenants():
    arr = np.arange(1, 33, dtype=np.int64)
    same = [Replay(arr, arr, 1, "a"), Replay(arr, arr, 1, "a")]
    other = [Replay(arr, arr, 1, "a"), Replay(arr, arr, 1, "b")]
    assert ideal_hit_rate(same, (1,)).bounds[1].hit_tokens == 31
    assert ideal_hit_rate(other, (1,)).bounds[1].hit_tokens == 0


def test_bad_arguments():
    reqs = generate(params("unique"), 0, SPACE)
    with pytest.raises(ValueError, match="needs a positive capacity"):
        simulate(reqs, 16, [0], policy="lru")
    with pytest.raises(
        UnknownNameError, match="unknown bounds policy 'opt'; valid: belady, lru, unbounded"
    ):
        simulate(reqs, 16, [4], policy="opt")
    with pytest.raises(ValueError, match="granularities must be positive integers"):
        ideal_hit_rate(reqs, (0,))


@pytest.mark.parametrize("family", ["multiturn", "rag"])
def test_run_bounds_equals_the_separate_references(family):
    # One hashing pass for everything a run reports gives the same numbers as separate calls.
    requests = generate(params(family), 0, SPACE)
    both = run_bounds(requests, [1, 16], capped_granularity=16, capacity_blocks=6)
    assert both.ideal == ideal_hit_rate(requests, [1, 16]).by_granularity
    for policy in ("lru", "belady"):
        assert both.capped[policy] == capped_hit_rate(requests, 16, 6, policy=policy).hit_rate
    assert run_bounds(requests, []) == run_bounds(requests, [], None)
    assert run_bounds(requests, [16]).capped == {}
