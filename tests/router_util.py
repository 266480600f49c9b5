"""What the real-router tests share: a router that is missing fails under CI (.ci/run installs
both with scripts/setup_routers.sh) and skips with the reason elsewhere; a module's worker fleet;
the small system-prompt stream the pipeline's real-router tests send."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.routers.fleet import router_available, routers_venv, worker_fleet


def need_router(kind: str) -> None:
    """Fail under CI=true, skip elsewhere, when `kind`-router is not installed."""
    if not router_available(kind):
        problem = (
            f"{kind}-router is not installed in {routers_venv()}: run scripts/setup_routers.sh"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)


def module_workers(tmp_path_factory: pytest.TempPathFactory, name: str, count: int) -> Iterator:
    """`count` built-in workers for a module's tests (started once, stopped by PID at its end),
    and their output folder; needs at least one router to be worth starting."""
    if not any(router_available(kind) for kind in ("sglang", "vllm")):
        need_router("sglang")
    out: Path = tmp_path_factory.mktemp(name)
    with worker_fleet(count, out) as fleet:
        yield fleet, out


def system_prompt_run(groups: int, per_group: int, prefix_len: int) -> list[str]:
    """The overrides of a small `system_prompt` run over workers of the tokenizer model:
    `groups` x `per_group` prompts sharing a `prefix_len`-token system prompt, 8-token questions,
    2 output tokens, one 16-token warm-up request."""
    return [
        "workload=system_prompt",
        f"workload.num_groups={groups}",
        f"workload.prompts_per_group={per_group}",
        f"workload.system_prompt_len={prefix_len}",
        "workload.question_len=8",
        "workload.output_len=2",
        "model=smollm2-rand",
        "warmup.num_requests=1",
        "warmup.prompt_len=16",
        "warmup.output_len=2",
    ]
