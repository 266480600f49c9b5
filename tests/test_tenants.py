"""Multi-tenant workloads through the harness: `workload.num_tenants` salts sessions per tenant,
and tenants never share cached KV, in either engine."""

from __future__ import annotations

import json

import pytest

from tests.test_cli import SMALL, SYSTEM_PROMPT_SMALL, harness, merged
from workloads.base import TokenSpace, generate
from workloads.system_prompt import SystemPromptParams


def test_tenants_get_round_robin_salts_and_share_only_within_a_tenant():
    params = SystemPromptParams(num_groups=2, prompts_per_group=4, system_prompt_len=64, question_len=8,
                                output_len=2, ordered=True, num_tenants=2)
    requests = generate(params, 0, TokenSpace(1000, 1))
    assert [r.salt for r in requests] == ["tenant0", "tenant1"] * 4
    # Group 0 is served to both tenants: each tenant's first copy of the system prompt is cold.
    assert [r.shared_prefix_len for r in requests] == [0, 0, 64, 64, 0, 0, 64, 64]


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_harness_run_with_tenants_hits_only_within_tenants(engine, tmp_path):
    args = merged(SYSTEM_PROMPT_SMALL, SMALL, [f"engine={engine}", "workload.num_tenants=3",
                                               "workload.ordered=true", "engine.max_num_seqs=1"])
    proc = harness(args, tmp_path / engine)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / engine / "summary.json").read_text())
    # One request at a time: the measured hit rate is exactly the (salt-aware) ideal.
    assert summary["hit_rate"] == pytest.approx(summary["ideal_hit_rate"])
    unsalted = json.loads(harness(merged(args, ["workload.num_tenants=0"]), tmp_path / "plain").stdout.splitlines()[-1])
    assert summary["hit_rate"] < unsalted["hit_rate"]
