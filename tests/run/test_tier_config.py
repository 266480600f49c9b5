"""The host tier from the command line: bad tier configs are one `error: ` line and exit 2 before
any run folder exists; a good one runs each design's tier and its rows and summary carry the
per-tier split (docs/tiers.md §5)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.run.execute import EXIT_BAD_INPUT, execute
from tests.harness_util import compose_config, run_like_the_cli, with_base

BAD = [
    (["engine.host_tier.tokens=-1"], "engine.host_tier.tokens must be an integer >= 0, got -1"),
    (["engine.host_tier.tokens=100000000000000"], "engine.host_tier.tokens must be at most"),
    (["engine.host_tier.tokens=4096", "engine.host_tier.policy=mru"], "policy must be one of"),
    (
        ["engine=radix", "engine.host_tier.tokens=4096", "engine.host_tier.write_policy=sometimes"],
        "write_policy must be one of",
    ),
    (["engine.host_tier.tokens=8"], "smaller than one apc tier unit (16 tokens)"),
    (
        ["engine.host_tier.tokens=100", "engine.host_tier.blocks_per_chunk=8"],
        "smaller than one apc tier unit (128 tokens)",
    ),
    (["engine.host_tier.tokens=4096", "engine.host_tier.blocks_per_chunk=0"], "blocks_per_chunk"),
    (["engine.host_tier.tokens=4096", "engine.host_tier.store_threshold=0"], "store_threshold"),
    (
        ["engine=radix", "engine.host_tier.tokens=4096", "engine.host_tier.policy=arc"],
        "engine.host_tier.policy is a knob of the apc design's tier",
    ),
    (
        ["engine=apc_sglang", "engine.host_tier.tokens=4096"],
        "engine.host_tier needs the apc cache's own scheduler (vllm)",
    ),
    (
        ["engine.host_tier.tokens=4096", "engine.prefix_caching=false"],
        "engine.host_tier.tokens must be 0 when engine.prefix_caching is false",
    ),
    (["engine.host_tier.size=3"], "host_tier.size"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_tier_config_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, lines, err = run_like_the_cli(with_base(args), run_dir, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert not run_dir.exists()


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_a_run_with_a_host_tier_splits_its_hits_by_tier(engine, tmp_path):
    # 8 prompts sharing a 48-token system prompt over 64 device tokens: the prefix leaves the
    # device between groups and comes back from the host tier.
    overrides = with_base(
        [
            f"engine={engine}",
            "engine.kv_capacity_tokens=128",
            "engine.max_num_seqs=1",
            "engine.host_tier.tokens=4096",
            "workload.num_groups=4",
            "workload.prompts_per_group=2",
        ]
    )
    run_dir = tmp_path / "run"
    assert execute(compose_config(overrides), run_dir) == 0
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    host = int(rows["host_cached_tokens"].sum())
    assert host > 0 and summary["prompt_tokens_cached_host"] == host
    device = int(rows["cached_tokens"].sum()) - host
    total = int(rows["prompt_tokens"].sum())
    assert summary["device_hit_rate"] == pytest.approx(device / total)
    assert summary["host_hit_rate"] == pytest.approx(host / total)
    assert summary["host_tier"]["hits"] == host and summary["host_tier"]["stored"] > 0
