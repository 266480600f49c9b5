"""apc with the CPU tier and the storage tier against vLLM's own async Scheduler with the
OffloadingConnector over vLLM's TieringOffloadingSpec (the CPU tier as primary, a real
file-system secondary tier in a temporary folder), driven in the vLLM venv
(tests/live/vllm_offload_scheduler_driver.py; only the GPU<->CPU transfer engine is a stub): the
same request streams must give every request the same device, CPU and storage cached tokens
(vLLM's local, external and the external part it attributes to the disk; docs/tiers.md §10.1):
one request at a time, and bursts (requests sent together; seven burst streams, the two others of
the probe in docs/tiers.md §10.1 still differ).

Needs .venv-vllm (scripts/setup_vllm.sh): skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engines.cache.tiers import HostTierConfig
from tests.apc_storage_streams import (
    Stream,
    conversation,
    generated,
    per_tier,
    resend,
    storage_engine,
    tail_evicted,
)
from tests.tier_streams import send, send_together

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = Path(__file__).with_name("vllm_offload_scheduler_driver.py")
MODEL = ROOT / ".models" / "llama-rand-smollm2"  # only its config is read (no weights run)

# a burst stream: each request with its wave; a wave's requests are sent together
Bursts = list[tuple[str, tuple[int, ...], tuple[int, ...], int]]


def bursts(seed: int, num: int, size: int) -> Bursts:
    """`generated(seed, num)` sent in waves of `size` requests at once."""
    return [(rid, p, o, k // size) for k, (rid, p, o) in enumerate(generated(seed, num))]


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
    (
        "burst8-arc-chunk2-1",
        bursts(51, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    ),
    ("burst16-lru-2", bursts(52, 48, 16), HostTierConfig(tokens=480), 480),
    (
        "burst8-arc-chunk2-2",
        bursts(52, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    ),
    ("burst32-lru-2", bursts(52, 48, 32), HostTierConfig(tokens=480), 480),
]


def ours(stream: Stream | Bursts, tier: HostTierConfig, device_tokens: int) -> dict[str, list[int]]:
    engine = storage_engine(
        device_tokens,
        tokens=tier.tokens,
        policy=tier.policy,
        blocks_per_chunk=tier.blocks_per_chunk,
        offload_prompt_only=tier.offload_prompt_only,
    )
    out: dict[str, list[int]] = {}
    entries: list[tuple[Any, ...]] = list(stream)
    k = 0
    while k < len(entries):
        if len(entries[k]) == 3:  # one request alone
            wave = [entries[k]]
            records = [send(engine, *entries[k])]
        else:
            wave = [entry for entry in entries[k:] if entry[3] == entries[k][3]]
            records = send_together(engine, [(rid, p, o) for rid, p, o, _ in wave])
        for rec in records:
            device, host, storage = per_tier(rec)
            out[rec.request_id] = [device, host + storage, storage]  # vLLM's local, external, disk
        k += len(wave)
    return out


def upstream_runs(root: Path) -> list[dict]:
    runs = []
    for name, stream, tier, device in CASES:
        bpc = tier.blocks_per_chunk
        runs.append(
            {
                "num_gpu_blocks": device // 16 + 1,
                "block_size": 16,
                "num_chunks": tier.tokens // (16 * bpc),
                "blocks_per_chunk": bpc,
                "policy": tier.policy,
                "store_threshold": tier.store_threshold,
                "offload_prompt_only": tier.offload_prompt_only,
                "model": str(MODEL),
                "requests": [[rid, list(p), list(o), *wave] for rid, p, o, *wave in stream],
                "storage_dir": str(root / name),
            }
        )
    return runs


def test_per_request_tiers_equal_vllms_tiering_manager_with_a_file_tier(tmp_path):
    if not VLLM_PYTHON.is_file() or not MODEL.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs .venv-vllm and its model folder (bash scripts/setup_vllm.sh)")
        pytest.skip("no .venv-vllm (bash scripts/setup_vllm.sh)")
    result = tmp_path / "upstream.json"
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), str(result)],
        input=json.dumps(upstream_runs(tmp_path)),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    upstream = json.loads(result.read_text())
    assert len(upstream) == len(CASES)
    storage_total = 0
    for (name, stream, tier, device), theirs in zip(CASES, upstream):
        mine = ours(stream, tier, device)
        assert mine == theirs, f"{name}: " + ", ".join(
            f"{rid} ours {mine[rid]} vllm {theirs.get(rid)}"
            for rid in mine
            if mine[rid] != theirs.get(rid)
        )
        storage_total += sum(disk for _, _, disk in mine.values())
    assert storage_total > 0  # the streams loaded from storage
