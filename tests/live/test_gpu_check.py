"""scripts/gpu_check.sh and its stages' scripts in their CPU dry runs: the commands a GPU session
runs work here (tiny shapes, interpreted Triton, model=tiny), and write what the docs say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT), **env)
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600)


def test_gpu_check_dry_run_quick_stages(tmp_path):
    out = tmp_path / "check"
    proc = run(
        ["bash", "scripts/gpu_check.sh", "--dry-run", "--out", str(out)],
        GPU_CHECK_STAGES="env,deps,ext,claim1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stages = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert [(name, rc) for name, rc, _ in stages] == [
        ("env", "0"), ("deps", "0"), ("ext", "0"), ("claim1", "0")
    ]  # fmt: skip
    assert "built and imported _pool_loops" in (out / "ext.txt").read_text()
    table = (out / "claim1" / "claim1.md").read_text()
    assert "| prefill-heavy | apc | 3 |" in table and "| decode-heavy | radix | 3 |" in table
    assert "claim 1: 0%-hit on/off pairs" in (out / "SUMMARY.md").read_text()
    assert "DRY RUN" in (out / "SUMMARY.md").read_text()


def test_gpu_check_rejects_unknown_arguments(tmp_path):
    proc = run(["bash", "scripts/gpu_check.sh", "--fast"])
    assert proc.returncode == 2
    assert "unknown argument '--fast'" in proc.stderr


def test_gpu_table_dry_run_writes_a_real_and_simulated_row(tmp_path):
    out = tmp_path / "e2e"
    proc = run(
        [sys.executable, "scripts/gpu_table.py", "--dry-run", "--limit", "1", "--out", str(out)]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads((out / "table.json").read_text())
    assert (row["workload"], row["engine"], row["page"], row["caching"]) == (
        "system_prompt", "apc", 16, True
    )  # fmt: skip
    assert row["real_status"] == row["sim_status"] == "ok"
    assert row["mean_tpot_ms_ratio"] == round(row["mean_tpot_ms_real"] / row["mean_tpot_ms_sim"], 3)
    assert row["hit_rate_real"] == row["hit_rate_sim"]  # the same admissions, another clock
    assert "| system_prompt | apc | 16 | on |" in (out / "table.md").read_text()
    assert (out / "runs" / "system_prompt-apc-page16-cacheon-real" / "summary.json").exists()


def test_bench_attention_dry_run_reports_both_kernels(tmp_path):
    out = tmp_path / "bench.json"
    proc = run(
        [sys.executable, "scripts/bench_attention.py", "--dry-run", "--block-size", "1",
         "--json", str(out)],
        TRITON_INTERPRET="1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["dry_run"] and result["block_size"] == 1
    backends = {(r["scenario"], r["backend"]) for r in result["rows"]}
    if result["interpreter"]:
        assert ("decode-b3-kv80", "triton-decode") in backends
        assert set(result["summary"]) == {"prefill-40", "decode-b3-kv80"}
    for r in result["rows"]:
        if r["max_err_vs_torch"] is not None:
            assert r["max_err_vs_torch"] <= 1e-5, r
        if r["scenario"].startswith("decode"):
            assert r["copy_bw_fraction"] is not None
