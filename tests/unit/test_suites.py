"""Experiment suites (conf/suite/*.yaml): they compose, sweep what they claim, and run end to end."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from harness.config.schema import register_configs

register_configs()  # the schemas Hydra composes against

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SUITES = sorted(p.stem for p in (CONF / "suite").glob("*.yaml"))


def compose_suite(name: str, overrides: tuple[str, ...] = ()):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        return compose(
            config_name="config", overrides=[f"+suite={name}", *overrides], return_hydra_config=True
        )


def jobs(cfg) -> list[list[str]]:
    """The job list the basic sweeper builds from the suite's sweeper params, in launch order."""
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    overrides = OverridesParser.create().parse_overrides(params)
    (batch,) = BasicSweeper.split_arguments(overrides, None)
    return batch


def test_suite_names():
    assert {"main", "capacity", "overhead", "trace"} <= set(SUITES)
    for name in SUITES:
        if name.endswith("_smoke"):
            assert name.removesuffix("_smoke") in SUITES
    assert "trace_sim" in SUITES


@pytest.mark.parametrize("name", SUITES)
def test_suite_composes_as_a_multirun(name):
    cfg = compose_suite(name)
    assert cfg.hydra.mode == RunMode.MULTIRUN
    assert cfg.hydra.sweep.dir.startswith(f"results/suite-{name}/")
    batch = jobs(cfg)
    assert len(batch) >= 2
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        distinct = {tuple(o for o in job if not o.startswith("seed=")) for job in batch}
        for job in sorted(distinct):  # every job of the sweep composes and is a valid RunConfig
            OmegaConf.to_object(compose(config_name="config", overrides=[f"+suite={name}", *job]))


# Families `main` leaves out: whole traces have suites of their own (`bailian` reads a Qwen-Bailian
# trace, shipped only as a 12-line format sample), and `prompts` replays the user's own prompt file
# (a 7-line sample by default): not a benchmark.
NOT_IN_MAIN = ("trace", "bailian", "prompts")


def test_main_covers_every_non_trace_family_and_three_arms():
    """Derived from the registered families and the suite itself, so a workload YAML a user adds
    (of an existing family) never makes this fail: every family has a workload in `main`, and
    every workload `main` names composes into its family's schema."""
    from workloads.base import FAMILIES

    batch = jobs(compose_suite("main"))
    workloads = {o.split("=")[1] for job in batch for o in job if o.startswith("workload=")}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        families = {
            w: compose(config_name="config", overrides=[f"workload={w}"]).workload.family
            for w in workloads
        }
    assert set(families.values()) == {f for f in FAMILIES.names() if f not in NOT_IN_MAIN}
    assert len(workloads) >= len(set(families.values()))
    assert [o for o in batch[0] + batch[1] + batch[2] if o.startswith("+suite/arm=")] == [
        "+suite/arm=apc",
        "+suite/arm=radix",
        "+suite/arm=radix_lpm",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        lpm = compose(config_name="config", overrides=["+suite=main", "+suite/arm=radix_lpm"])
    assert (lpm.engine.cache, lpm.engine.policy, lpm.engine.block_size) == ("radix", "lpm", 1)


def test_overhead_interleaves_on_off_with_at_least_five_seeds():
    cfg = compose_suite("overhead")
    assert cfg.workload.name == "unique"
    batch = jobs(cfg)
    arms = [next(o for o in job if o.startswith("+suite/arm=")).split("=")[1] for job in batch]
    seeds = [int(next(o for o in job if o.startswith("seed=")).split("=")[1]) for job in batch]
    assert len(set(seeds)) >= 5
    assert arms[:8] == ["apc", "apc", "radix", "radix"] * 2
    assert seeds[:8] == [0, 0, 0, 0, 1, 1, 1, 1]  # each seed's on/off pair runs back to back
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        caching = [
            compose(config_name="config", overrides=["+suite=overhead", *job]).engine.prefix_caching
            for job in batch[:8]
        ]
    # ABBA: on/off for seed 0, off/on for seed 1, for both engines
    assert caching == [True, False, True, False, False, True, False, True]


def test_capacity_and_trace_sweep_capacity():
    capacities = {
        o for job in jobs(compose_suite("capacity")) for o in job if "kv_capacity_tokens" in o
    }
    assert len(capacities) >= 4
    parts = {
        o for job in jobs(compose_suite("trace")) for o in job if o.startswith("+suite/trace_part=")
    }
    assert parts == {"+suite/trace_part=real_small", "+suite/trace_part=real_large"}
    sim = {
        o
        for job in jobs(compose_suite("trace_sim"))
        for o in job
        if o.startswith("+suite/trace_part=")
    }
    assert sim == {"+suite/trace_part=sim_small", "+suite/trace_part=sim_large"}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        whole = compose(
            config_name="config", overrides=["+suite=trace_sim", "+suite/trace_part=sim_large"]
        )
    assert (whole.executor, whole.workload.max_requests, whole.hardware.name) == (
        "simulated",
        None,
        "cpu_measured",
    )
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        real = compose(
            config_name="config", overrides=["+suite=trace", "+suite/trace_part=real_small"]
        )
    assert (real.workload.name, real.workload.max_requests, real.executor) == (
        "mooncake_conversation",
        4,
        "real",
    )


def test_rate_sweeps_the_request_rate_with_both_engines():
    cfg = compose_suite("rate")
    assert (cfg.load.mode, cfg.workload.name) == ("poisson", "system_prompt")
    batch = jobs(cfg)
    rates = {float(o.split("=")[1]) for job in batch for o in job if o.startswith("load.rate=")}
    arms = {o.split("=")[1] for job in batch for o in job if o.startswith("+suite/arm=")}
    assert len(rates) >= 4 and arms == {"apc", "radix"}


def test_overhead_tool_alternates_the_order_within_pairs():
    from harness.run.overhead import abba_order

    assert abba_order(0) == [("apc", True), ("apc", False), ("radix", True), ("radix", False)]
    assert abba_order(1) == [("apc", False), ("apc", True), ("radix", False), ("radix", True)]


def test_a_rate_sweep_runs_in_process_with_one_summary_row_per_rate(tmp_path):
    """rate_smoke's jobs through harness.run.execute (what the CLI runs), then the report."""
    from harness.report import build_report
    from harness.run.execute import EXIT_OK, execute

    cfg = compose_suite("rate_smoke")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3", job_name="harness"):
        for i, job in enumerate(jobs(cfg)):
            job_cfg = compose(config_name="config", overrides=["+suite=rate_smoke", *job])
            assert execute(job_cfg, tmp_path / "sweep" / str(i)) == EXIT_OK
    build_report(tmp_path, figures=False, out_dir=tmp_path)
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert sorted(summary["load.rate"]) == [4.0, 4.0, 64.0, 64.0]  # apc and radix at each rate
    assert set(summary["n_ok"]) == {1}
