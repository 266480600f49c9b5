"""One run pipeline: the CLI, the claims and the overhead tool record the same run the same way.

The CLI (harness/run/execute.py), `harness.claims.experiment.run_arm` and `harness.run.overhead` all go
through harness/run/pipeline.py; on one tiny configuration they must agree on the manifest's fields
(the resolved device included, never the raw `auto`) and on the measured window's step count
(warm-up steps never counted). Boundary tests keep the stages of a run in the pipeline alone,
for every target (the in-process engine, a live server), and driving in the targets' own parts.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from harness.claims.experiment import run_arm
from harness.run import overhead
from tests.harness_util import SMALL, merged, run_harness

ROOT = Path(__file__).resolve().parents[2]
# The overhead tool's own arm (unique workload, stepped one by one), made tiny.
TINY_UNIQUE = merged(
    SMALL,
    [
        "workload=unique",
        "engine=apc",
        "engine.prefix_caching=true",
        "engine.decode_runs=false",
        "workload.num_prompts=4",
        "workload.prompt_len=24",
        "workload.output_len=3",
        "device=auto",
    ],
)


@pytest.fixture(scope="module")
def three_paths(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("paths")
    cli = run_harness(TINY_UNIQUE, tmp / "cli")
    assert cli.returncode == 0, cli.stderr
    arm = run_arm("arm", TINY_UNIQUE, tmp / "claims")
    tool_overrides = [o for o in TINY_UNIQUE if o.split("=")[0] not in overhead_fixed()]
    cfg = overhead.config("apc", True, tool_overrides)
    measured = overhead.measure_arm(cfg, cfg.seed)
    return {
        "cli": {
            "manifest": json.loads((cli.run_dir / "manifest.json").read_text()),
            "num_steps": cli.summary["num_steps"],
        },
        "claims": {
            "manifest": json.loads((tmp / "claims" / "arm" / "manifest.json").read_text()),
            "num_steps": arm.summary["num_steps"],
        },
        "overhead": {"num_steps": measured["num_steps"]},
    }


def overhead_fixed() -> set[str]:
    return {"workload", "engine", "engine.prefix_caching", "engine.decode_runs"}


def test_cli_and_claims_write_the_same_manifest_fields(three_paths):
    cli, claims = three_paths["cli"]["manifest"], three_paths["claims"]["manifest"]
    assert set(cli) == set(claims)
    assert cli["device"] == claims["device"] != "auto"  # resolved, on both paths
    assert cli["device"] in ("cpu", "cuda")
    assert cli["config_fingerprint"] == claims["config_fingerprint"]


def test_every_path_counts_the_measured_steps_only(three_paths):
    steps = {path: facts["num_steps"] for path, facts in three_paths.items()}
    assert len(set(steps.values())) == 1, steps
    # 4 prompts of 24 tokens, 3 output tokens, one prefill step for all then 2 decode steps:
    # the warm-up's steps would add to this if they were counted.
    assert steps["cli"] == 3


def _calls_in(path: Path) -> set[str]:
    """Names called in a module: `f(...)` and `x.f(...)` both give `f`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


# The stages of a run, each called in one place: harness/run/pipeline.py, for every target.
STAGES = {
    "generate_with_notes",
    "with_arrivals",
    "check_requests",
    "warmup_requests",
    "warm_up_and_flush",
    "summarize",
    "summary_dict",
    "format_summary",
}
# The run's result files: the pipeline, the CLI's record of a run that did not finish, and the
# run directory that writes them.
FILES = {"write_summary", "write_requests"}
# An imported client run (harness/export/import_run.py) has rows but no pipeline behind them: it
# summarizes them with the run's own definitions, so both summaries mean the same.
IMPORT_STAGES = {"summarize", "summary_dict"}
# The run folder's tables are written by a run, and by an import of another client's run (its rows
# and summary, with no pipeline behind them: harness/export/import_run.py).
FILE_OWNERS = {
    "harness/run/pipeline.py",
    "harness/run/execute.py",
    "harness/results/run_dir.py",
    "harness/export/import_run.py",
}
# Driving an engine or a server: a target's own part, the client layer's in-process driver, the
# twin's replay of what a live server was sent, and the built-in server (it serves an engine to
# HTTP clients; it runs no benchmark).
DRIVING = {"drive", "run_batch", "submit", "add_request", "reset", "reset_counters"}
DRIVERS = {
    "harness/run/pipeline.py",  # calls the session's `drive`, the target's part
    "harness/client/inprocess.py",
    "harness/live_server/twin.py",
    "harness/live_server/steplock.py",  # the twin stepped along the server's KV events
    "harness/builtin_server/app.py",
    "harness/builtin_server/engine_thread.py",
    "harness/fleet/fleet.py",  # N engines the engine target drives as one (docs/fleet.md §1)
}


def _target_modules() -> set[str]:
    from harness.run.targets import TARGETS

    modules = {type(TARGETS.get(name).load()).__module__ for name in TARGETS}
    return {m.replace(".", "/") + ".py" for m in modules}


def test_only_the_pipeline_runs_the_stages_for_every_target():
    """A second copy of the run pipeline is what drifted before (claims recorded `device: auto`,
    the overhead tool counted warm-up steps, a live server's run repeated prepare, finish and the
    summary): every module of harness/, the targets included, is checked."""
    offenders = {}
    for path in sorted((ROOT / "harness").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        calls = _calls_in(path)
        stages = STAGES - IMPORT_STAGES if rel == "harness/export/import_run.py" else STAGES
        found = (calls & stages if rel != "harness/run/pipeline.py" else set()) | (
            calls & FILES if rel not in FILE_OWNERS else set()
        )
        if found:
            offenders[rel] = sorted(found)
    assert offenders == {}


def test_only_a_target_or_a_driver_drives_an_engine_or_a_server():
    allowed = DRIVERS | _target_modules()
    assert {"harness/run/engine_target.py", "harness/live_server/target.py"} <= allowed
    offenders = {
        str(path.relative_to(ROOT)): sorted(DRIVING & _calls_in(path))
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if str(path.relative_to(ROOT)) not in allowed
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_config_picks_the_target_from_the_registry():
    from harness.live_server.config import ServerConfig
    from harness.run.compose import compose
    from harness.run.targets import target_for, target_name

    cfg = compose(TINY_UNIQUE).cfg
    assert target_name(cfg) == "engine"
    served = dataclasses.replace(cfg, server=ServerConfig(flavour="vllm"))
    assert target_name(served) == "live_server"
    assert type(target_for(served)).__name__ == "LiveServerTarget"
