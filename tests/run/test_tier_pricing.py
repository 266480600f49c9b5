"""A simulated run with a host tier prices its transfers on the preset's host link and reports the
bounds at device + host capacity (docs/tiers.md §7, §8); with the tier off none of it appears."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.run.execute import execute
from tests.harness_util import compose_config, with_base

SIMULATED = [
    "executor=simulated",
    "hardware=h100_llama3_8b_bf16",
    "engine.kv_capacity_tokens=128",
    "engine.max_num_seqs=1",
    "workload.num_groups=4",
    "workload.prompts_per_group=2",
]
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B bf16: 2 x 32 layers x 8 heads x 128 x 2 bytes


@pytest.mark.parametrize(
    "engine", [("engine=apc",), ("engine=radix", "engine.overlap=false"), ("engine=radix",)]
)
def test_a_priced_tier_reports_bytes_load_time_and_the_two_tier_bounds(engine, tmp_path):
    run_dir = tmp_path / "run"
    overrides = with_base([*engine, *SIMULATED, "engine.host_tier.tokens=4096"])
    assert execute(compose_config(overrides), run_dir) == 0
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    link = summary["host_link"]
    assert (
        link["bandwidth_bytes_per_s"] == 5e10 and link["kv_bytes_per_token"] == KV_BYTES_PER_TOKEN
    )
    hits = rows["host_cached_tokens"]
    assert hits.sum() > 0
    assert (rows["host_load_bytes"] == hits * KV_BYTES_PER_TOKEN).all()
    # a load's time is its own bytes on the link plus the loads queued before it in its step
    own_ms = rows["host_load_bytes"] / 5e10 * 1e3
    assert own_ms.sum() == pytest.approx(link["load_s"] * 1e3)
    assert (rows["host_load_ms"] >= own_ms - 1e-12).all()
    assert link["load_s"] == pytest.approx(link["load_bytes"] / 5e10)
    # one request at a time, radix stores at a finished request's insert; SGLang's overlap loop
    # processes that after the request's row (docs/tiers.md §7.1), so only the summary has them
    overlap = engine == ("engine=radix",)
    assert (rows["host_store_bytes"].sum() > 0) is not overlap
    assert rows["host_store_bytes"].sum() <= link["store_bytes"]
    # every store the tier made crossed the link, the last ones after the last step
    assert link["store_bytes"] == summary["host_tier"]["stored"] * KV_BYTES_PER_TOKEN
    # more capacity never hurts the optimal policy
    assert summary["belady_hit_rate_device_host"] >= summary["belady_hit_rate"]
    assert summary["theoretical_hit_rate_capped_device_host"] is not None


def test_tier_off_has_no_link_and_zero_tier_columns(tmp_path):
    run_dir = tmp_path / "run"
    assert execute(compose_config(with_base(SIMULATED)), run_dir) == 0
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "host_link" not in summary and "belady_hit_rate_device_host" not in summary
    cols = ["host_cached_tokens", "host_load_bytes", "host_store_bytes", "host_load_ms"]
    assert (rows[cols] == 0).all().all()
