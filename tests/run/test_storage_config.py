"""The storage tier from the command line (docs/tiers.md §10): bad storage configs of either design
are one `error: ` line and exit 2 before any run folder exists; a run of each design with one
splits its rows' and summary's hits into device, host and storage."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.run.execute import EXIT_BAD_INPUT, execute
from tests.harness_util import compose_config, run_like_the_cli, with_base

RADIX = ["engine=radix", "engine.host_tier.tokens=4096"]
ON = "engine.storage_tier.enabled=true"
BAD = [
    (["engine=radix", ON], "engine.storage_tier needs a host tier"),
    ([*RADIX, ON, "engine.storage_tier.prefetch_policy=eager"], "prefetch_policy must be one of"),
    ([*RADIX, ON, "engine.storage_tier.prefetch_threshold=-1"], "prefetch_threshold must be an"),
    ([*RADIX, ON, "engine.storage_tier.prefetch_timeout_base=-1"], "prefetch_timeout_base"),
    ([*RADIX, ON, "engine.storage_tier.enabled=maybe"], "storage_tier.enabled"),
    ([*RADIX, ON, "engine.storage_tier.size=3"], "storage_tier.size"),
    # apc: vLLM's tiering refuses a store threshold; radix's knobs are refused under apc
    (["engine.storage_tier.enabled=true"], "engine.storage_tier needs a host tier"),
    (
        [
            "engine.host_tier.tokens=4096",
            "engine.host_tier.store_threshold=2",
            "engine.storage_tier.enabled=true",
        ],
        "engine.storage_tier under apc needs engine.host_tier.store_threshold 1",
    ),
    (
        [
            "engine.host_tier.tokens=4096",
            "engine.storage_tier.enabled=true",
            "engine.storage_tier.prefetch_policy=timeout",
        ],
        "engine.storage_tier.prefetch_policy is a knob of the radix design's storage tier",
    ),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_storage_config_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, lines, err = run_like_the_cli(with_base(args), run_dir, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert not run_dir.exists()


def test_a_radix_run_with_a_storage_tier_splits_its_hits_three_ways(tmp_path):
    # 16 prompts on 8 system prompts of 48 tokens, one at a time, over 128 device tokens and a
    # 192-token host pool: a system prompt leaves both before its group's second prompt
    overrides = with_base(
        [
            "engine=radix",
            "executor=simulated",
            "hardware=h100_llama3_8b_bf16",
            "engine.kv_capacity_tokens=128",
            "engine.max_num_seqs=1",
            "engine.host_tier.tokens=192",
            "load.max_concurrency=1",  # one request at a time: each arrives after the last's store
            ON,
            "engine.storage_tier.prefetch_policy=wait_complete",
            "engine.storage_tier.prefetch_threshold=16",
            "workload.num_groups=8",
            "workload.prompts_per_group=2",
        ]
    )
    run_dir = tmp_path / "run"
    assert execute(compose_config(overrides), run_dir) == 0
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    storage = int(rows["storage_cached_tokens"].sum())
    host = int(rows["host_cached_tokens"].sum())
    assert storage > 0 and summary["prompt_tokens_cached_storage"] == storage
    assert host > 0 and summary["prompt_tokens_cached_host"] == host  # the two stay disjoint
    total = int(rows["prompt_tokens"].sum())
    assert summary["storage_hit_rate"] == pytest.approx(storage / total)
    device = int(rows["cached_tokens"].sum()) - host - storage
    assert summary["device_hit_rate"] == pytest.approx(device / total)
    assert summary["storage_tier"]["loaded"] >= storage > 0  # the counters reach the summary
    link = summary["storage_link"]  # the preset's storage bandwidth prices the reads (§10.3)
    assert link["read_bytes"] >= storage * link["kv_bytes_per_token"] > 0
    assert link["read_s"] == pytest.approx(link["read_bytes"] / link["bandwidth_bytes_per_s"])


def test_an_apc_run_with_a_storage_tier_splits_its_hits_into_three_tiers(tmp_path):
    # multiturn over 640 device and 768 CPU tokens: conversations come back from each tier
    overrides = with_base(
        [
            "workload=multiturn",
            "engine.kv_capacity_tokens=640",
            "engine.host_tier.tokens=768",
            "engine.storage_tier.enabled=true",
        ]
    )
    run_dir = tmp_path / "run"
    assert execute(compose_config(overrides), run_dir) == 0
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    host = int(rows["host_cached_tokens"].sum())
    storage = int(rows["storage_cached_tokens"].sum())
    assert host > 0 and storage > 0
    assert summary["prompt_tokens_cached_storage"] == storage
    total = int(rows["prompt_tokens"].sum())
    assert summary["storage_hit_rate"] == pytest.approx(storage / total)
    assert summary["storage_tier"]["hits"] == storage and summary["storage_tier"]["stored"] > 0
