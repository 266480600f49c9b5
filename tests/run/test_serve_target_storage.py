"""A live server with a storage tier behind its host tier, driven by the harness's server
target (docs/tiers.md §4.2): the built-in server (in this process) runs apc or radix with a small
host tier and storage, so the conversations' first turns leave the device and the host before the
second turns. Under the sglang flavour the rows carry SGLang's `storage` part, under the vllm
flavour the external part (host + storage) as the host part; with the run's engine.storage_tier on,
the twin predicts all three tiers, and each request's split equals the twin's."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.builtin_server.server import InProcessServer, compose_config, prepare
from tests.harness_util import run_harness

ENGINE = [
    "engine.kv_capacity_tokens=512",
    "engine.max_num_batched_tokens=256",
    "engine.max_num_seqs=16",
    "engine.backend=torch",
]
TIER = {
    "apc": ["engine.host_tier.tokens=768", "engine.storage_tier.enabled=true"],
    "radix": [
        "engine.host_tier.tokens=1024",
        "engine.storage_tier.enabled=true",
        "engine.storage_tier.prefetch_policy=wait_complete",
        "engine.storage_tier.prefetch_threshold=64",
    ],
}
# What SGLang's flavour reads from SGLang's own endpoints, which the built-in server lacks.
SGLANG_FACTS = {
    engine: [f"server.block_size={size}", "server.kv_capacity_tokens=512", "server.overlap=false"]
    for engine, size in (("apc", 16), ("radix", 1))
}
WORKLOAD = [
    "workload=multiturn",
    "workload.num_users=6",
    "workload.num_rounds=2",
    "workload.system_prompt_len=32",
    "workload.user_history_len=128",
    "workload.question_len=16",
    "workload.answer_len=20",
]


def _run(tokenizer, out, engine: str, flavour: str, twin_tier: list[str]):
    cfg = compose_config([f"engine={engine}", "model=tiny", "device=cpu", *ENGINE, *TIER[engine]])
    with InProcessServer(prepare(cfg)) as server:
        run = run_harness(
            [
                f"server={flavour}",
                f"server.url={server.url}",
                f"server.tokenizer={tokenizer}",
                f"engine={engine}",  # the host tier's size comes from the server (vllm flavour)
                *twin_tier,  # the storage tier and its knobs: the run's engine, for the twin
                *(SGLANG_FACTS[engine] if flavour == "sglang" else []),
                "server.max_num_seqs=16",
                "server.max_num_batched_tokens=256",
                "warmup.enabled=false",
                "load.max_concurrency=1",
                *WORKLOAD,
            ],
            out,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    table = pd.read_parquet(run.run_dir / "requests.parquet")
    assert run.summary["failed"] == 0 and run.summary["one_at_a_time"] is True
    return run.summary, table


@pytest.mark.parametrize("flavour", ["sglang", "vllm"])
@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_served_storage_equals_the_twins_per_request(tokenizer, tmp_path, engine, flavour):
    summary, table = _run(
        tokenizer, tmp_path / f"{engine}-{flavour}", engine, flavour, TIER[engine]
    )
    host, storage = table["host_cached_tokens"], table["storage_cached_tokens"]
    pred_host = table["predicted_host_cached_tokens"]
    pred_storage = table["predicted_storage_cached_tokens"]
    assert pred_storage.sum() > 0  # second turns left the device and the host
    assert (table["cached_tokens"] == table["predicted_cached_tokens"]).all()
    if flavour == "sglang":  # SGLang's details: each tier apart
        assert table["storage_cached_tokens_reported"].all()
        assert (host == pred_host).all() and (storage == pred_storage).all()
        assert summary["reported_storage_cached_tokens_sum"] == int(storage.sum())
        assert summary["twin_served_storage_tokens"] == int(pred_storage.sum())
    else:  # vLLM's external part is host + storage: read as the host part, storage unknown
        assert not table.loc[table["cached_tokens"] > 0, "storage_cached_tokens_reported"].any()
        assert (host == pred_host + pred_storage).all() and (storage == 0).all()
        assert summary["reported_storage_cached_tokens_sum"] is None
        assert summary["twin_served_storage_tokens"] == 0
    assert summary["twin_predicted_storage_tokens"] == int(pred_storage.sum())
    assert summary["twin_tier_requests"] == summary["twin_tier_matches"] == len(table)
    # the counters hold every source (SGLang's cached_tokens_total has a storage series; vLLM's
    # prefix-cache hits plus its connector's, which include storage)
    assert summary["server_hits_delta"] == int(table["cached_tokens"].sum())
    print(f"{engine} {flavour}: {len(table)} requests, cached {int(table['cached_tokens'].sum())}"
          f", host {int(pred_host.sum())}, storage {int(pred_storage.sum())}, all equal per tier")  # fmt: skip


def test_a_twin_without_storage_does_not_match_storage_hits(tokenizer, tmp_path):
    """The run's engine has the host tier only: the twin predicts no storage, so the requests
    the server served from storage are counted as not matching per tier."""
    summary, table = _run(tokenizer, tmp_path, "radix", "sglang", TIER["radix"][:1])
    from_storage = int((table["storage_cached_tokens"] > 0).sum())
    assert from_storage > 0 and summary["twin_predicted_storage_tokens"] is None
    assert table["predicted_storage_cached_tokens"].isna().all()
    assert summary["twin_tier_matches"] <= len(table) - from_storage
    assert summary["twin_served_storage_tokens"] == int(table["storage_cached_tokens"].sum())
