"""Every synthetic family: deterministic under its seed, and sharing exactly what it declares."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.workload_util import SMALL, SPACE, brute_shared, common_prefix, params
from workloads.base import FAMILIES, generate
from workloads.registry import UnknownNameError

VARIANTS = [
    ("system_prompt", {}),
    ("system_prompt", dict(group_distribution="zipf", zipf_alpha=1.5, range_ratio=0.5)),
    ("system_prompt", dict(ordered=True)),
    ("fewshot", {}),
    ("fewshot", dict(order_policy="shuffled", pool_size=4, ordered=False)),
    ("fewshot", dict(order_policy="rotated", instruction_len=0)),
    ("multiturn", {}),
    ("multiturn", dict(order="sequential", system_prompt_len=0, user_history_len=0)),
    ("parallel", {}),
    ("rag", {}),
    ("rag", dict(doc_popularity="zipf", doc_order="popularity", system_prompt_len=0)),
    ("rag", dict(doc_order="sorted_id", layout="question_first")),
    ("unique", {}),
    ("trace", {}),
]


@pytest.mark.parametrize("family", sorted(SMALL))
def test_deterministic_under_seed_and_different_under_another(family):
    a = generate(params(family), 0, SPACE)
    assert a == generate(params(family), 0, SPACE)
    b = generate(params(family), 1, SPACE)
    assert sorted(r.request_id for r in a) == sorted(r.request_id for r in b)  # same shape
    assert [r.prompt_ids for r in a] != [r.prompt_ids for r in b]
    assert len({r.request_id for r in a}) == len(a)
    # seed_offset shifts the seed
    assert generate(params(family, seed_offset=1), 0, SPACE) == b


@pytest.mark.parametrize("family,overrides", VARIANTS)
def test_shared_prefix_len_is_the_true_common_prefix(family, overrides):
    reqs = generate(params(family, **overrides), 3, SPACE)
    assert [r.shared_prefix_len for r in reqs] == brute_shared(reqs)
    for r in reqs:
        assert min(r.prompt_ids) >= SPACE.first_workload_id and max(r.prompt_ids) < SPACE.vocab_size
        assert r.output_len >= 1


def test_system_prompt_groups_share_exactly_their_system_prompt():
    p = params("system_prompt")
    reqs = generate(p, 0, SPACE)
    assert len(reqs) == p.num_groups * p.prompts_per_group
    for a in reqs:
        for b in reqs:
            if a is not b:
                same = a.tags["group"] == b.tags["group"]
                assert common_prefix(a.prompt_ids, b.prompt_ids) == (
                    p.system_prompt_len if same else 0
                )
    assert all(len(r.prompt_ids) == p.system_prompt_len + p.question_len for r in reqs)
    shuffled_groups = [r.tags["group"] for r in reqs]
    assert shuffled_groups != sorted(shuffled_groups)  # ordered=false shuffles
    ordered = [r.tags["group"] for r in generate(params("system_prompt", ordered=True), 0, SPACE)]
    assert ordered == sorted(ordered)


def test_system_prompt_zipf_and_range_ratio():
    p = params(
        "system_prompt",
        num_groups=8,
        prompts_per_group=20,
        group_distribution="zipf",
        zipf_alpha=1.5,
        range_ratio=0.5,
    )
    reqs = generate(p, 0, SPACE)
    counts = Counter(r.tags["group"] for r in reqs)
    assert sum(counts.values()) == 160 and counts[0] > counts.get(7, 0)
    lens = [len(r.prompt_ids) for r in reqs]
    assert min(lens) >= 20 + 4 and max(lens) <= 40 + 8 and len(set(lens)) > 1


def test_unique_shares_nothing_not_even_the_first_token():
    p = params("unique")
    reqs = generate(p, 0, SPACE)
    assert len({r.prompt_ids[0] for r in reqs}) == p.num_prompts
    assert {len(r.prompt_ids) for r in reqs} == {p.prompt_len} and {r.output_len for r in reqs} == {
        p.output_len
    }
    assert all(r.shared_prefix_len == 0 for r in reqs)


def test_parallel_samples_diverge_at_their_first_output_token():
    p = params("parallel")
    reqs = generate(p, 0, SPACE)
    for r in reqs:
        assert (
            r.n == p.n
            and len(r.sample_output_ids) == p.n
            and r.output_ids == r.sample_output_ids[0]
        )
        assert len({s[0] for s in r.sample_output_ids}) == p.n
        assert {len(s) for s in r.sample_output_ids} == {p.output_len}
    assert len({r.prompt_ids[0] for r in reqs}) == p.num_prompts


def test_multiturn_turn_extends_previous_prompt_and_answer():
    p = params("multiturn", think_s=0.5)
    reqs = generate(p, 0, SPACE)
    by_id = {r.request_id: r for r in reqs}
    assert [r.request_id for r in reqs[:3]] == ["u0-r0", "u1-r0", "u2-r0"]  # round robin
    for r in reqs:
        if r.turn == 0:
            assert r.after is None and r.think_s == 0.0
            continue
        prev = by_id[r.after]
        assert prev.session_id == r.session_id and prev.turn == r.turn - 1 and r.think_s == 0.5
        head = prev.prompt_ids + prev.output_ids
        assert r.prompt_ids[: len(head)] == head and len(r.prompt_ids) == len(head) + p.question_len
    firsts = [r for r in reqs if r.turn == 0]
    assert common_prefix(firsts[0].prompt_ids, firsts[1].prompt_ids) == p.system_prompt_len
    sequential = generate(params("multiturn", order="sequential"), 0, SPACE)
    assert [r.request_id for r in sequential[:3]] == ["u0-r0", "u0-r1", "u0-r2"]


def test_multiturn_answers_depend_only_on_seed_user_round():
    a = {r.request_id: r.output_ids for r in generate(params("multiturn"), 0, SPACE)}
    b = {
        r.request_id: r.output_ids
        for r in generate(params("multiturn", order="sequential"), 0, SPACE)
    }
    assert a == b


def test_fewshot_fixed_shares_instruction_and_shots_within_a_task_only():
    p = params("fewshot")
    reqs = generate(p, 0, SPACE)
    shared = p.instruction_len + p.k_shots * p.shot_len
    for a in reqs:
        for b in reqs:
            if a is not b:
                expect = shared if a.tags["task"] == b.tags["task"] else 0
                assert common_prefix(a.prompt_ids, b.prompt_ids) == expect


def test_fewshot_shuffled_breaks_reuse_at_first_differing_shot():
    p = params("fewshot", order_policy="shuffled", pool_size=3)
    reqs = generate(p, 0, SPACE)
    for a in reqs:
        for b in reqs:
            if a is not b and a.tags["task"] == b.tags["task"]:
                same = next(
                    (j for j in range(p.k_shots) if a.tags["shots"][j] != b.tags["shots"][j]),
                    p.k_shots,
                )
                assert (
                    common_prefix(a.prompt_ids, b.prompt_ids)
                    == p.instruction_len + same * p.shot_len
                )
    rotated = generate(params("fewshot", order_policy="rotated"), 0, SPACE)
    assert rotated[1].tags["shots"] == [1, 2, 0]


def test_rag_question_first_shares_nothing_leading():
    p = params("rag", layout="question_first")
    reqs = generate(p, 0, SPACE)
    assert len({r.prompt_ids[0] for r in reqs}) == len(reqs)
    assert all(r.shared_prefix_len == 0 for r in reqs)
    static = generate(params("rag"), 0, SPACE)
    assert all(r.shared_prefix_len >= p.system_prompt_len for r in static[1:])
    # same content, different layout: the documents of request i are the same
    assert [r.tags["docs"] for r in reqs] == [r.tags["docs"] for r in static]


def test_rag_doc_orders():
    for order, key in (("popularity", None), ("sorted_id", sorted)):
        reqs = generate(params("rag", doc_order=order, num_prompts=30), 0, SPACE)
        if key is not None:
            assert all(r.tags["docs"] == key(r.tags["docs"]) for r in reqs)
    zipf = generate(params("rag", doc_popularity="zipf", zipf_alpha=2.0, num_prompts=200), 0, SPACE)
    counts = Counter(d for r in zipf for d in r.tags["docs"])
    assert max(counts.values()) > 2 * min(counts.values())
    assert all(len(set(r.tags["docs"])) == 2 for r in zipf)


@pytest.mark.parametrize(
    "family,field,value,message",
    [
        ("system_prompt", "num_groups", 0, "workload.num_groups must be a positive integer, got 0"),
        ("unique", "prompt_len", -3, "workload.prompt_len must be a positive integer, got -3"),
        (
            "fewshot",
            "order_policy",
            "sorted",
            "workload.order_policy must be one of fixed, rotated, shuffled",
        ),
        ("fewshot", "pool_size", 2, "workload.pool_size must be at least k_shots"),
        ("system_prompt", "range_ratio", 0.0, r"workload.range_ratio must be in \(0, 1\]"),
        (
            "multiturn",
            "user_history_len",
            -1,
            "workload.user_history_len must be a non-negative integer",
        ),
        ("multiturn", "think_s", -1.0, "workload.think_s must be a non-negative number"),
        ("rag", "docs_per_request", 9, r"workload.docs_per_request must be at most num_docs \(5\)"),
        ("parallel", "n", 2.5, "workload.n must be a positive integer"),
        ("trace", "slowdown", 0.0, "workload.slowdown must be a positive number"),
        ("trace", "max_requests", 0, "workload.max_requests must be a positive integer or null"),
        ("unique", "version", 0, "workload.version must be a positive integer"),
    ],
)
def test_bad_params_fail_naming_the_field(family, field, value, message):
    with pytest.raises(ValueError, match=message):
        generate(params(family, **{field: value}), 0, SPACE)


def test_too_many_distinct_pieces_for_the_vocabulary():
    with pytest.raises(ValueError, match="workload.num_prompts asks for 40 prompts"):
        generate(
            params("unique", num_prompts=40), 0, type(SPACE)(vocab_size=30, first_ordinary_id=1)
        )


def test_unknown_family_lists_valid_ones_and_mappings_work():
    with pytest.raises(
        UnknownNameError, match="unknown workload family 'nope'; valid: bailian, dataset, fewshot"
    ):
        generate({"family": "nope"}, 0, SPACE)
    reqs = generate(
        {"family": "unique", "name": "u", "num_prompts": 2, "prompt_len": 3, "output_len": 1},
        0,
        SPACE,
    )
    assert len(reqs) == 2
    with pytest.raises(
        ValueError, match="workload.prompt_lens is not a parameter of family 'unique'"
    ):
        generate({"family": "unique", "prompt_lens": 3}, 0, SPACE)


def test_every_family_has_a_dataclass_schema_with_common_fields():
    assert set(FAMILIES.names()) == {
        "bailian",
        "dataset",
        "fewshot",
        "mix",
        "multiturn",
        "parallel",
        "prompts",
        "rag",
        "system_prompt",
        "trace",
        "unique",
    }
    for name in FAMILIES.names():
        p = FAMILIES.get(name).params_cls()
        assert p.family == name and p.version == 1 and p.seed_offset == 0 and p.name
        p.validate()
