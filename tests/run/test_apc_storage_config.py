"""apc's storage tier from the command line (docs/tiers.md §10.1): a storage tier vLLM refuses is
one `error: ` line and exit 2 before any run folder exists; a good one runs, and its rows and
summary split the hits into device, host and storage."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.run.execute import EXIT_BAD_INPUT, execute
from tests.harness_util import compose_config, run_like_the_cli, with_base

BAD = [
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
def test_a_bad_apc_storage_config_is_one_line_and_exit_2(args, needle, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, lines, err = run_like_the_cli(with_base(args), run_dir, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert not run_dir.exists()


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
