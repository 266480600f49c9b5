"""Multi-tenant workloads through the harness: `workload.num_tenants` salts sessions per tenant,
and tenants never share cached KV, in either engine."""

from __future__ import annotations

import pytest

from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness
from workloads.base import TokenSpace, generate
from workloads.system_prompt import SystemPromptParams


def test_tenants_get_round_robin_salts_and_share_only_within_a_tenant():
    params = SystemPromptParams(
        num_groups=2,
        prompts_per_group=4,
        system_prompt_len=64,
        question_len=8,
        output_len=2,
        ordered=True,
        num_tenants=2,
    )
    requests = generate(params, 0, TokenSpace(1000, 1))
    assert [r.salt for r in requests] == ["tenant0", "tenant1"] * 4
    # Group 0 is served to both tenants: each tenant's first copy of the system prompt is cold.
    assert [r.shared_prefix_len for r in requests] == [0, 0, 64, 64, 0, 0, 64, 64]


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_harness_run_with_tenants_hits_only_within_tenants(engine, tmp_path):
    args = merged(
        SYSTEM_PROMPT_SMALL,
        SMALL,
        [
            f"engine={engine}",
            "workload.num_tenants=3",
            "workload.ordered=true",
            "engine.max_num_seqs=1",
        ],
    )
    run = run_harness(args, tmp_path / engine)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = run.summary
    # One request at a time: the measured hit rate is exactly the (salt-aware) ideal.
    assert summary["hit_rate"] == pytest.approx(summary["ideal_hit_rate"])
    unsalted = run_harness(merged(args, ["workload.num_tenants=0"]), tmp_path / "plain").summary
    assert summary["hit_rate"] < unsalted["hit_rate"]
