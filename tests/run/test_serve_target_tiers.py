"""A live server with a host tier, driven by the harness's server target, against the twin per
tier (docs/tiers.md §4): the built-in server (in this process) runs apc or radix with a host
tier on a device small enough that the conversations' earlier turns leave it, and the twin,
given the tier's size by the server's cache-config info, predicts for every request both the
cached tokens and the host tier's part of them, which must equal what the server returned."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from harness.metrics.format import format_summary
from tests.harness_util import run_harness

ENGINE = [
    "engine.kv_capacity_tokens=512",  # four users' histories do not fit: round 2 hits the host
    "engine.max_num_batched_tokens=256",
    "engine.max_num_seqs=16",
    "engine.backend=torch",
]
TIER = "engine.host_tier.tokens=4096"
WORKLOAD = [
    "workload=multiturn",
    "workload.num_users=4",
    "workload.num_rounds=2",
    "workload.system_prompt_len=32",
    "workload.user_history_len=128",
    "workload.question_len=16",
    "workload.answer_len=20",
]


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_served_tiers_equal_the_twins_per_request(tokenizer, tmp_path, engine):
    cfg = compose_config([f"engine={engine}", "model=tiny", "device=cpu", *ENGINE, TIER])
    with InProcessServer(prepare(cfg)) as server:
        run = run_harness(
            [
                "server=vllm",
                f"server.url={server.url}",
                f"server.tokenizer={tokenizer}",
                f"engine={engine}",  # the tier's size comes from the server
                "server.max_num_seqs=16",
                "server.max_num_batched_tokens=256",
                "warmup.enabled=false",
                "load.max_concurrency=1",
                *WORKLOAD,
            ],
            tmp_path / engine,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = run.summary
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    assert summary["failed"] == 0 and summary["one_at_a_time"] is True
    assert table["host_cached_tokens_reported"].all()
    host, pred_host = table["host_cached_tokens"], table["predicted_host_cached_tokens"]
    assert host.sum() > 0  # the device evicted and the host tier answered
    assert (table["cached_tokens"] == table["predicted_cached_tokens"]).all()
    assert (host == pred_host).all()
    assert summary["twin_tier_requests"] == summary["twin_tier_matches"] == len(table)
    assert summary["twin_served_host_tokens"] == summary["twin_predicted_host_tokens"]
    assert summary["reported_host_cached_tokens_sum"] == int(host.sum())
    assert summary["host_hit_rate"] == pytest.approx(host.sum() / table["prompt_tokens"].sum())
    served_host = f"{int(host.sum()):,}"
    table_text = format_summary(summary)  # the run's printed table
    assert f"host tier {served_host} of {served_host} tokens, 8/8 requests exact per tier" in (
        table_text
    )
    # the counters hold every source: vLLM's prefix hits plus its connector's
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    print(f"{engine}: {len(table)} requests, host {int(host.sum())} of "
          f"{int(table['cached_tokens'].sum())} cached tokens, all equal to the twin's")  # fmt: skip
