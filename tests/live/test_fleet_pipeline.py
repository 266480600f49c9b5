"""A real router inside the one pipeline: `python -m harness ... fleet.real=sglang-router` runs a
workload through sglang-router over 3 built-in workers into one run folder (rows with the replica
and the twin's predicted replica, the fleet's figures, the router's files), and `harness.report`
puts it in fleet.csv; replies through either router are streamed (rows with real TTFT, TPOT and
ITLs, 2 workers); bad input is one line, exit 2, nothing started and no folder left (one case
here through the command; the rest in-process, tests/run/test_fleet_real_bounds.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from harness.run.execute import EXIT_BAD_INPUT
from tests.cli_util import harness
from tests.harness_util import ROOT
from tests.router_util import need_router, system_prompt_run

# 3 groups x 4 prompts sharing a 96-token system prompt, shuffled: cache_aware has work to do
STREAM = system_prompt_run(groups=3, per_group=4, prefix_len=96)
FLEET = ["fleet.replicas=3", "fleet.router=cache_aware", "fleet.real=sglang-router"]


def test_a_workload_runs_through_the_real_router_and_into_the_report(tmp_path):
    need_router("sglang")
    run_dir = tmp_path / "runs" / "fleet"
    proc = harness([*_with(["workload.output_len=5"]), *FLEET], run_dir, timeout=480)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sglang-router cache_aware (3 replicas)" in proc.stdout + proc.stderr  # the routing
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["fleet_real"] == "sglang-router"
    twin = summary["fleet_twin"]
    assert twin["scored"] + twin["guesses"] == 12 and 0 <= twin["first_pick"] < 3
    table = pd.read_parquet(run_dir / "requests.parquet")
    assert len(table) == 12 and table["replica"].between(0, 2).all()
    assert table["predicted_replica"].between(0, 2).all()
    per = {p["replica"]: p["requests"] for p in summary["fleet_per_replica"]}
    assert per == table["replica"].value_counts().reindex(range(3), fill_value=0).to_dict()
    decisions = pd.read_csv(run_dir / "fleet" / "decisions.csv")
    assert sorted(decisions["request_id"]) == sorted(table["request_id"])
    assert (
        decisions.set_index("request_id")["actual"] == table.set_index("request_id")["replica"]
    ).all()
    streamed(table.set_index("request_id"), decisions.set_index("request_id"), summary)
    assert summary["fleet_hit_rate"] <= summary["fleet_bound_hit_rate"] + 1e-12
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["fleet"]["real"] == "sglang-router"

    report = subprocess.run(
        [sys.executable, "-m", "harness.report", str(run_dir.parent)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-3000:]
    fleet = pd.read_csv(run_dir.parent / "fleet.csv")
    row = fleet[fleet["router"] == "sglang-router/cache_aware"].iloc[0]
    assert row["replicas"] == 3 and row["n_runs"] == 1 and row["router_loss"] >= 0
    assert any((run_dir.parent / "figures").glob("*.png"))


def _with(overrides: list[str], base: list[str] = STREAM) -> list[str]:
    """`base` with each key of `overrides` set to its value there (Hydra refuses a key twice)."""
    keys = {o.split("=")[0] for o in overrides}
    return [o for o in base if o.split("=")[0] not in keys] + overrides


def streamed(table: pd.DataFrame, decisions: pd.DataFrame, summary: dict) -> None:
    """Rows read from streamed replies (both indexed by request id): each TTFT is its first
    token's arrival, its token gaps the ITLs, its worker and cached tokens those of the stream."""
    assert (table["ttft_ms"] > 0).all() and (table["ttft_ms"] < table["e2el_ms"]).all()
    assert (table["tpot_ms"] > 0).all()
    assert (table["first_token_s"] < table["finish_s"]).all()
    assert (decisions["actual"] == table["replica"]).all()  # the worker named in the stream
    assert (decisions["output_tokens"] == table["output_tokens"]).all()
    # one time per token, so output_tokens - 1 gaps between them
    assert (decisions["tokens_streamed"] - 1 == table["output_tokens"] - 1).all()
    assert (decisions["cached_tokens"] == table["cached_tokens"]).all()
    assert summary["prompt_tokens_cached"] == decisions["cached_tokens"].sum() > 0
    assert 0 < summary["median_ttft_ms"] < summary["median_e2el_ms"]
    assert summary["median_tpot_ms"] > 0 and summary["max_itl_ms"] > 0
    # a row's end (the stream's [DONE]) is at or after its last token
    assert 0 < summary["mean_itl_ms"] <= summary["mean_tpot_ms"] + 1e-9


def test_replies_through_vllm_router_are_streamed(tmp_path):
    """2 workers, round robin, 2 groups x 3 prompts of 5 tokens (sglang-router's streamed rows
    are checked in the first test, on its own run)."""
    need_router("vllm")
    run_dir = tmp_path / "vllm-router"
    stream = _with(
        ["workload.num_groups=2", "workload.prompts_per_group=3", "workload.output_len=5"]
    )
    fleet = ["fleet.replicas=2", "fleet.router=round_robin", "fleet.real=vllm-router"]
    proc = harness([*stream, *fleet], run_dir, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_parquet(run_dir / "requests.parquet").set_index("request_id")
    assert len(table) == 6 and (table["output_tokens"] == 5).all()
    decisions = pd.read_csv(run_dir / "fleet" / "decisions.csv").set_index("request_id")
    assert sorted(decisions.index) == sorted(table.index)
    summary = json.loads((run_dir / "summary.json").read_text())
    streamed(table, decisions, summary)


def test_a_refused_real_fleet_is_one_line_and_leaves_nothing(tmp_path):
    """The command's own stderr: one line (the other refusals run in-process:
    tests/run/test_fleet_real_bounds.py, tests/run/test_resource_promise.py)."""
    need_router("sglang")
    run_dir = tmp_path / "bad"
    needle = "not a sglang-router policy; valid: round_robin"
    proc = harness([*_with(["fleet.router=kv_aware"], [*STREAM, *FLEET])], run_dir, timeout=120)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr
    assert not run_dir.exists()
