"""apc with the CPU tier and the storage tier against vLLM's own async Scheduler with the
OffloadingConnector over vLLM's TieringOffloadingSpec (the CPU tier as primary, a real
file-system secondary tier in a temporary folder), driven in the vLLM venv
(tests/live/vllm_offload_scheduler_driver.py; only the GPU<->CPU transfer engine is a stub): the
same request streams must give every request the same device, CPU and storage cached tokens
(vLLM's local, external and the external part it attributes to the disk; docs/tiers.md §10.1),
and the same preemptions and tokens computed again after them: one request at a time, and bursts
(requests sent together; the nine burst streams of the probe in docs/tiers.md §10.1).

Needs .venv-vllm (scripts/setup_vllm.sh): skipped without it, a failure under CI=true.
"""

from __future__ import annotations

from engines.cache.tiers import HostTierConfig
from engines.records import RequestRecord
from tests.apc_storage_streams import (
    Stream,
    conversation,
    generated,
    per_tier,
    resend,
    storage_engine,
    tail_evicted,
)
from tests.vllm_offload_reference import (
    Bursts,
    bursts,
    differences,
    driver_run,
    requeued,
    run_vllm,
    send_stream,
)

# (name, stream, CPU tier knobs, device tokens)
CASES: list[tuple[str, Stream | Bursts, HostTierConfig, int]] = [
    ("resend", resend(), HostTierConfig(tokens=640), 640),
    ("chunk4", resend(), HostTierConfig(tokens=640, blocks_per_chunk=4), 640),
    ("whole", resend(length=320), HostTierConfig(tokens=640), 640),
    ("tail", tail_evicted(), HostTierConfig(tokens=640), 320),
    ("conversation", conversation(), HostTierConfig(tokens=640), 640),
    (
        "with-output",
        conversation(),
        HostTierConfig(tokens=640, offload_prompt_only=False),
        640,
    ),
    ("gen-lru", generated(0), HostTierConfig(tokens=480, policy="lru"), 480),
    ("gen-arc", generated(1), HostTierConfig(tokens=480, policy="arc"), 480),
    ("gen-chunk2", generated(2), HostTierConfig(tokens=640, blocks_per_chunk=2), 480),
    ("gen-output", generated(3), HostTierConfig(tokens=480, offload_prompt_only=False), 480),
    ("burst16-lru-0", bursts(50, 48, 16), HostTierConfig(tokens=480), 480),
    (
        "burst8-arc-chunk2-0",
        bursts(50, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    ),
    ("burst32-lru-0", bursts(50, 48, 32), HostTierConfig(tokens=480), 480),
    # g1 is preempted after its decodes and admitted again: the block its last processed token
    # completed is cached on the device (vllm_loads.py `cache_sampled`), not asked of storage
    ("burst16-lru-1", bursts(51, 48, 16), HostTierConfig(tokens=480), 480),
    (
        "burst8-arc-chunk2-1",
        bursts(51, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    ),
    ("burst32-lru-1", bursts(51, 48, 32), HostTierConfig(tokens=480), 480),
    ("burst16-lru-2", bursts(52, 48, 16), HostTierConfig(tokens=480), 480),
    (
        "burst8-arc-chunk2-2",
        bursts(52, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    ),
    ("burst32-lru-2", bursts(52, 48, 32), HostTierConfig(tokens=480), 480),
]


def vllm_tiers(rec: RequestRecord) -> list[int]:
    """A record's tiers as the driver reports vLLM's: local, external (host + storage), disk;
    then its preemptions and the tokens it computed again after them."""
    device, host, storage = per_tier(rec)
    return [device, host + storage, storage, *requeued(rec)]


def ours(stream: Stream | Bursts, tier: HostTierConfig, device_tokens: int) -> dict[str, list[int]]:
    engine = storage_engine(
        device_tokens,
        tokens=tier.tokens,
        policy=tier.policy,
        blocks_per_chunk=tier.blocks_per_chunk,
        offload_prompt_only=tier.offload_prompt_only,
    )
    return send_stream(engine, stream, vllm_tiers)


def test_per_request_tiers_equal_vllms_tiering_manager_with_a_file_tier(tmp_path):
    runs = [
        driver_run(stream, tier, device, storage_dir=str(tmp_path / name))
        for name, stream, tier, device in CASES
    ]
    upstream = run_vllm(runs, tmp_path / "upstream.json")
    storage_total = preemptions = 0
    for (name, stream, tier, device), theirs in zip(CASES, upstream, strict=True):
        mine = ours(stream, tier, device)
        assert mine == theirs, differences(name, mine, theirs)
        storage_total += sum(counts[2] for counts in mine.values())
        preemptions += sum(counts[3] for counts in mine.values())
    assert storage_total > 0  # the streams loaded from storage
    assert preemptions > 0  # and the bursts preempted requests
