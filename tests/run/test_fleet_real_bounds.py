"""A real-router run (`python -m harness ... fleet.real=...`) refuses bad input before anything
starts: one `error:` line naming the key the user typed, exit 2, no run folder left. In this
process: the tier guard fails the test if any process were started (every check here comes
before the probe for the router, so none needs a router installed). Workers beyond what the
machine holds: tests/run/test_resource_promise.py; what vLLM workers refuse:
tests/run/test_fleet_workers.py; the same line from the command itself:
tests/live/test_fleet_pipeline.py."""

from __future__ import annotations

import pytest

from harness.run.execute import EXIT_BAD_INPUT
from tests.harness_util import merged, run_harness

BASE = [  # refused before the workload is generated: its size does not matter
    "workload=system_prompt",
    "model=smollm2-rand",
    "fleet.replicas=2",
    "fleet.real=sglang-router",
    "fleet.router=round_robin",
]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["fleet.replicas=0"], "fleet.replicas must be an integer in [1, 1024], got 0"),
        (["fleet.replicas=1"], "fleet.replicas (with fleet.real) must be an integer in [2, 1024]"),
        (["fleet.real=nope"], "fleet.real must be one of sglang-router, vllm-router"),
        (["fleet.router=nope"], "unknown fleet router 'nope'; valid: cache_aware"),
        (
            ["fleet.router=kv_aware"],
            "fleet.router='kv_aware' is not a sglang-router policy; "
            "valid: round_robin, random, cache_aware, power_of_two",
        ),
        (["fleet.router=cached_now"], "fleet.router='cached_now' is not a sglang-router policy"),
        (
            ["engine=radix", "fleet.real=vllm-router", "fleet.router=kv_aware"],
            "kv_aware reads the workers' KV events: engine must be one of apc",
        ),
        (["model=tiny"], "model=tiny has no tokenizer (model=smollm2-rand has one)"),
        (["workload.num_groups=0"], "workload.num_groups must be a positive integer, got 0"),
        (["workload.prompts_per_group=0"], "workload.prompts_per_group must be a positive"),
        (["workload=unique", "workload.num_prompts=0"], "num_prompts"),
        (["load.max_concurrency=0"], "load.max_concurrency must be an integer in [1, "),
    ],
)
def test_bad_input_of_a_real_router_run_is_one_line_and_leaves_nothing(overrides, needle, tmp_path):
    run_dir = tmp_path / "run"
    run = run_harness(merged(BASE, overrides), run_dir)
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == EXIT_BAD_INPUT, run.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not run_dir.exists()
