"""A real-router run's workers, router and twin share one block size (docs/fleet.md §5): with
`engine.block_size=32` the built-in workers are started with 32-token blocks, vllm-router's
kv_aware is told `--kv-event-block-size 32` and the twin's index hashes 32-token blocks, so the
router's block keys are the ones the workers' KV events publish. No process is started here: the
command lines are read as they would run (the event endpoints' free ports are looked up, hence
tests/run and not tests/unit)."""

from __future__ import annotations

import pytest

from engines.errors import BadInput
from harness.routers.fleet import KV_EVENT_BLOCK, Workers, fleet_layout, router_command
from harness.routers.target import check_real_fleet
from harness.routers.workers import worker_plan
from harness.run.compose import compose

RUN = [
    "workload=system_prompt",
    "model=smollm2-rand",
    "fleet.replicas=2",
    "fleet.router=kv_aware",
    "fleet.real=vllm-router",
]
PORTS = [41000, 41001]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _kv_router(workers: Workers) -> list[str]:
    cfg = compose(RUN).cfg
    return router_command("vllm", cfg.fleet, workers, 1, 2, "smollm2-rand")


@pytest.mark.parametrize("block", [16, 32, 64])
def test_the_router_and_every_worker_get_the_runs_block_size(block):
    cfg = compose([*RUN, f"engine.block_size={block}"]).cfg
    plan = worker_plan(cfg)
    assert plan.block_size == block
    layout = fleet_layout(PORTS, cfg.model.name, cfg.engine.cache, plan.block_size)
    assert [c.count(f"engine.block_size={block}") for c in layout.commands] == [1, 1]
    assert layout.workers.block_size == block
    command = _kv_router(layout.workers)
    assert _flag(command, "--kv-event-block-size") == str(block)
    assert command.count("--kv-event-source") == 2


def test_without_a_block_size_the_design_keeps_its_own():
    """The module fleet of the live tests: no block size given, so radix keeps its 1-token
    pages and apc its 16-token blocks, the router's default too."""
    radix = fleet_layout(PORTS, engine="radix")
    assert not any("engine.block_size=" in arg for c in radix.commands for arg in c)
    apc = fleet_layout(PORTS)
    assert apc.workers.block_size == KV_EVENT_BLOCK == 16
    assert _flag(_kv_router(apc.workers), "--kv-event-block-size") == "16"


def test_a_block_size_is_never_a_loose_override():
    with pytest.raises(ValueError, match="block_size"):
        fleet_layout(PORTS, overrides=["engine.block_size=32"])


def test_running_workers_of_another_block_size_are_refused():
    cfg = compose([*RUN, "engine.block_size=32"]).cfg
    running = fleet_layout(PORTS, block_size=16).workers
    with pytest.raises(BadInput, match="engine.block_size=32, but the running workers' blocks"):
        check_real_fleet(cfg, running)
