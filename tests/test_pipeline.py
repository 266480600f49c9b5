"""One run pipeline: the CLI, the claims and the overhead tool record the same run the same way.

The CLI (harness/run/execute.py), `harness.claims.experiment.run_arm` and `harness.run.overhead` all go
through harness/run/pipeline.py; on one tiny configuration they must agree on the manifest's fields
(the resolved device included, never the raw `auto`) and on the measured window's step count
(warm-up steps never counted). A boundary test keeps warm-up, flush and driving the engine in
the pipeline alone.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from harness.claims.experiment import run_arm
from harness.run import overhead
from tests.harness_util import SMALL, merged, run_harness

ROOT = Path(__file__).resolve().parents[1]
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


def test_only_the_pipeline_warms_up_flushes_and_drives_the_engine():
    """A second copy of the run pipeline is what drifted before (claims recorded `device: auto`,
    the overhead tool counted warm-up steps); harness code reaches the engine through it."""
    owned = {"warm_up_and_flush", "drive", "reset", "run_batch", "submit", "add_request"}
    allowed = {
        ROOT / "harness" / "run" / "pipeline.py",
        ROOT / "harness" / "client" / "inprocess.py",
    }
    offenders = {
        str(path.relative_to(ROOT)): sorted(owned & _calls_in(path))
        for path in sorted((ROOT / "harness").rglob("*.py"))
        # harness/builtin_server serves the engine; harness/live_server drives a live server (its
        # own async driver over the same ReleaseQueue) and replays its twin through client.inprocess.
        if path not in allowed
        and path.parts[-3:-1] not in (("harness", "builtin_server"), ("harness", "live_server"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
