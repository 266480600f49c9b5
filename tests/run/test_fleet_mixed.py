"""Mixed fleets (`fleet.designs`): each replica of another design is that design's preset over the
run's engine, exactly as `engine=<design>` composes; a replica runs as it would in a fleet of its
own design; every router policy runs on a mixed fleet; the summary has per-design figures; bad
lists are one line and exit 2."""

from __future__ import annotations

import pytest

from harness.fleet.config import FleetConfig
from harness.fleet.mixed import design_engine, replica_designs
from harness.fleet.policies import ROUTERS
from harness.metrics.format import format_summary
from harness.report.build import build_report
from harness.run.compose import compose
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]
BASE = merged(SMALL, SYSTEM_PROMPT_SMALL, SIM)


@pytest.mark.parametrize("run_engine, other", [("apc", "radix"), ("radix", "apc")])
def test_a_replica_of_another_design_is_that_designs_preset(run_engine, other):
    tuned = ["engine.max_num_seqs=16"]  # a shared knob the run set: kept
    run = compose(merged(SMALL, [f"engine={run_engine}"], tuned)).cfg.engine
    preset = compose(merged(SMALL, [f"engine={other}"], tuned)).cfg.engine
    assert design_engine(run, other) == preset
    assert design_engine(run, run_engine) is run  # the run's own design: its engine unchanged


def test_a_design_knob_of_the_run_stays_on_its_own_design():
    run = compose(merged(SMALL, ["engine=apc", "engine.hash_algo=xxhash"])).cfg.engine
    radix = design_engine(run, "radix")
    assert radix.hash_algo == "sha256"  # back at its default under radix (validation needs it)
    radix.validate()


def test_designs_cycle_over_the_replicas():
    cfg = FleetConfig(replicas=5, designs=["apc", "radix"])
    assert replica_designs(cfg) == ["apc", "radix", "apc", "radix", "apc"]
    assert replica_designs(FleetConfig(replicas=3)) is None


def _per_replica(summary: dict) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "design"} for p in summary["fleet_per_replica"]]


def test_each_replica_runs_as_in_a_fleet_of_its_own_design(tmp_path):
    """Round robin routes without reading caches or clocks, so replica i of a mixed fleet gets
    the same requests as replica i of a one-design fleet, and must serve them alike."""
    over = ["fleet.replicas=2", "fleet.router=round_robin", "workload.prompts_per_group=6"]
    # a prefill step of one prompt: SGLang's overlap loop (radix's default) matches a prompt from
    # two steps after it was prefilled, so a burst admitted in one step would hit nothing
    over += ["engine.max_num_batched_tokens=64"]
    mixed = run_harness(BASE + over + ["fleet.designs=[apc,radix]"], tmp_path / "mixed")
    apc = run_harness(BASE + over + ["engine=apc"], tmp_path / "apc")
    radix = run_harness(BASE + over + ["engine=radix"], tmp_path / "radix")
    assert mixed.returncode == apc.returncode == radix.returncode == 0, mixed.stderr
    got = _per_replica(mixed.summary)
    assert got[0] == _per_replica(apc.summary)[0]
    assert got[1] == _per_replica(radix.summary)[1]
    assert [p["design"] for p in mixed.summary["fleet_per_replica"]] == ["apc", "radix"]
    assert got[0]["cached_tokens"] > 0 and got[1]["cached_tokens"] > 0  # both caches hit
    # radix reuses the page-1 prefix, apc whole 16-token blocks: the designs differ here
    assert got[0]["cached_tokens"] != got[1]["cached_tokens"]
    # fleet.csv: the mixed fleet is a row of its own, never averaged with either design's
    table = build_report(tmp_path, figures=False, out_dir=tmp_path / "report").fleet
    assert sorted(table["engine"]) == ["apc", "mixed:apc+radix", "radix"]
    assert (table["n_runs"] == 1).all()


@pytest.mark.parametrize("router", ROUTERS.names())
def test_every_policy_runs_on_a_mixed_fleet(router, tmp_path):
    over = ["fleet.replicas=3", f"fleet.router={router}", "fleet.designs=[radix,apc]"]
    run = run_harness(BASE + over, tmp_path / router)
    assert run.returncode == 0, run.stderr
    s = run.summary
    designs = s["fleet_per_design"]
    assert [d["design"] for d in designs] == ["radix", "apc"]
    assert [d["replicas"] for d in designs] == [2, 1]
    assert sum(d["requests"] for d in designs) == s["completed"]
    for d in designs:
        rows = [p for p in s["fleet_per_replica"] if p["design"] == d["design"]]
        assert d["cached_tokens"] == sum(p["cached_tokens"] for p in rows)
        assert d["prompt_tokens"] == sum(p["prompt_tokens"] for p in rows)
    assert s["fleet_hit_rate"] <= s["fleet_bound_hit_rate"] + 1e-12
    text = format_summary(s).splitlines()
    head = text.index(next(ln for ln in text if ln.split()[:2] == ["design", "requests"]))
    assert [ln.split()[0] for ln in text[head + 1 : head + 3]] == ["radix", "apc"]


def test_one_design_listed_is_the_unmixed_fleet_plus_design_columns(tmp_path):
    over = ["fleet.replicas=3", "fleet.router=cache_aware"]
    plain = run_harness(BASE + over, tmp_path / "plain")
    listed = run_harness(BASE + over + ["fleet.designs=[apc]"], tmp_path / "listed")
    assert plain.returncode == listed.returncode == 0
    assert "fleet_per_design" not in plain.summary
    assert all("design" not in p for p in plain.summary["fleet_per_replica"])
    assert _per_replica(listed.summary) == plain.summary["fleet_per_replica"]
    assert listed.summary["fleet_per_design"][0]["requests"] == plain.summary["completed"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["fleet.designs=[apc,lru]"],
            "fleet.designs: unknown cache design 'lru'; valid: apc, radix",
        ),
        (
            ["fleet.designs=[]"],
            "fleet.designs must name at least one cache design (valid: apc, radix)",
        ),
        (["fleet.designs=[apc,radix,apc,radix]"], "fleet.designs lists 4 designs for 3 replicas"),
        (["fleet.replicas=1", "fleet.designs=[radix]"], "fleet.designs needs a fleet"),
        (
            ["engine=radix", "engine.kv_capacity_tokens=4100", "fleet.designs=[radix,apc]"],
            "fleet.designs: the apc replicas' engine: engine.kv_capacity_tokens (4100) must be",
        ),
    ],
)
def test_bad_designs_are_one_line_exit_2(args, needle, tmp_path):
    out = tmp_path / "run"
    run = run_harness(BASE + ["fleet.replicas=3"] + args, out)
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode == 2, run.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not out.exists()
