"""`fleet.workers`: what a real-router run refuses about its workers before anything starts (one
`error:` line naming the key, exit 2, no run folder): an unknown kind, vLLM workers without a real
router, and what vLLM-CPU workers cannot do: another model than the one their folder is built as,
another cache design, a block size their attention backend does not take, more than one request
at a time (a reply's worker is read from their success counters), a KV pool past their KV space
(more workers than the memory holds: tests/run/test_resource_promise.py). In this process: the tier guard fails the test if anything
were started, and none of these needs vLLM or a router installed."""

from __future__ import annotations

import pytest

from harness.run.execute import EXIT_BAD_INPUT
from tests.harness_util import merged, run_harness

BASE = [
    "workload=system_prompt",
    "workload.num_groups=2",
    "workload.prompts_per_group=2",
    "model=smollm2-rand",
    "engine.block_size=32",
    "fleet.replicas=2",
    "fleet.real=vllm-router",
    "fleet.router=round_robin",
    "fleet.workers=vllm",
]


def _refused(overrides: list[str], run_dir) -> str:
    run = run_harness(merged(BASE, overrides), run_dir)
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == EXIT_BAD_INPUT, run.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not run_dir.exists()
    return lines[0]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["fleet.workers=gpu"], "fleet.workers must be one of builtin, vllm, got 'gpu'"),
        (
            ["fleet.workers=builtin", "fleet.vllm_eager=true"],
            "fleet.vllm_eager=true starts vLLM workers eagerly: it takes fleet.workers=vllm",
        ),
        (
            ["fleet.real=null"],
            "fleet.workers=vllm puts servers behind a real router: set fleet.real",
        ),
        (["model=tiny"], "model=tiny cannot be served by them (use model=smollm2-rand)"),
        (["model.num_layers=2"], "model.num_layers=2 is not the model the vLLM servers serve"),
        (["engine=radix", "engine.block_size=32"], "engine=radix does not apply"),
        (["engine.block_size=16"], "engine.block_size=16: vLLM-CPU workers take a multiple of 32"),
        (["load.max_concurrency=4"], "load.max_concurrency=4: vLLM workers are told apart"),
        (
            ["engine.kv_capacity_tokens=1048576"],
            "engine.kv_capacity_tokens=1048576: a vLLM-CPU worker's KV pool would take 4.0 GiB",
        ),
    ],
)
def test_what_vllm_workers_cannot_do_is_refused_first(overrides, needle, tmp_path):
    assert needle in _refused(overrides, tmp_path / "run")
