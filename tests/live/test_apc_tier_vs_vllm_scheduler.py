"""apc with a host tier against vLLM's own async Scheduler with the OffloadingConnector, driven in
the vLLM venv (tests/live/vllm_offload_scheduler_driver.py; only the transfer engine is a stub):
the same request streams must give every request the same device and host cached tokens
(docs/tiers.md §2). The streams are the hand-made ones of tests/unit/test_apc_tiers.py and
generated ones of prompts sharing prefixes, one request at a time, and generated bursts (requests
sent together, so loads wait, preemptions and releases interleave with other requests' steps).

Needs .venv-vllm (scripts/setup_vllm.sh): skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engines.cache.tiers import HostTierConfig
from tests.tier_streams import Prompts, send, send_together, tier_engine, tiers

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = Path(__file__).with_name("vllm_offload_scheduler_driver.py")
MODEL = ROOT / ".models" / "llama-rand-smollm2"  # only its config is read (no weights run)
OUT = (101, 102, 103, 104)

Stream = list[tuple[str, tuple[int, ...], tuple[int, ...]]]
# a burst stream: each request with its wave; a wave's requests are sent together
Bursts = list[tuple[str, tuple[int, ...], tuple[int, ...], int]]


def resend_after_eviction(n_fill: int = 3, length: int = 300) -> Stream:
    p = Prompts(0)
    a = p.tokens(length)
    fills = [(f"f{i}", p.tokens(300), OUT) for i in range(n_fill)]
    return [("a1", a, OUT), *fills, ("a2", a, OUT)]


def seen_three_times() -> Stream:
    p = Prompts(1)
    a = p.tokens(300)
    f = [(f"f{i}", p.tokens(300), OUT) for i in range(6)]
    return [("a1", a, OUT), *f[:3], ("a2", a, OUT), *f[3:], ("a3", a, OUT)]


def scan() -> Stream:
    p = Prompts(2)
    a = p.tokens(300)
    f = [(f"f{i}", p.tokens(300), OUT) for i in range(8)]
    return [("a1", a, OUT), *f[:3], ("a2", a, OUT), *f[3:], ("a3", a, OUT)]


def conversation() -> Stream:
    p = Prompts(3)
    turn1, reply = p.tokens(300), tuple(range(2000, 2040))
    f = [(f"f{i}", p.tokens(300), OUT) for i in range(3)]
    return [("t1", turn1, reply), *f, ("t2", turn1 + reply + p.tokens(30), OUT)]


def generated(seed: int, num: int = 40) -> Stream:
    """Prompts from five families (a shared head of 40-200 tokens, then their own 10-200)."""
    rng = np.random.default_rng(seed)
    p = Prompts(100 + seed)
    heads = [p.tokens(int(rng.integers(40, 200))) for _ in range(5)]
    out: Stream = []
    for i in range(num):
        head = heads[int(rng.integers(0, 5))]
        tail = tuple(rng.integers(1, 30000, int(rng.integers(10, 200))).tolist())
        reply = tuple(rng.integers(1, 30000, int(rng.integers(2, 24))).tolist())
        out.append((f"g{i}", head + tail, reply))
    return out


def bursts(seed: int, num: int, size: int) -> Bursts:
    """`generated(seed, num)` sent in waves of `size` requests at once."""
    return [(rid, p, o, k // size) for k, (rid, p, o) in enumerate(generated(seed, num))]


# (name, stream, tier knobs, device tokens)
CASES: list[tuple[str, Stream | Bursts, HostTierConfig, int]] = [
    ("resend", resend_after_eviction(), HostTierConfig(tokens=4096), 640),
    ("chunk4", resend_after_eviction(), HostTierConfig(tokens=4096, blocks_per_chunk=4), 640),
    ("threshold2", seen_three_times(), HostTierConfig(tokens=4096, store_threshold=2), 640),
    ("scan-lru", scan(), HostTierConfig(tokens=1280, policy="lru"), 640),
    ("scan-arc", scan(), HostTierConfig(tokens=1280, policy="arc"), 640),
    ("prompt-only", conversation(), HostTierConfig(tokens=4096), 640),
    ("with-output", conversation(), HostTierConfig(tokens=4096, offload_prompt_only=False), 640),
    ("whole", resend_after_eviction(length=320), HostTierConfig(tokens=4096), 640),
    ("gen-lru", generated(0), HostTierConfig(tokens=960, policy="lru"), 800),
    ("gen-arc", generated(1), HostTierConfig(tokens=960, policy="arc"), 800),
    (
        "gen-chunk2-t2",
        generated(2),
        HostTierConfig(tokens=1280, blocks_per_chunk=2, store_threshold=2),
        800,
    ),
    ("gen-output", generated(3), HostTierConfig(tokens=960, offload_prompt_only=False), 800),
]
# three seeds of each burst shape
for seed in range(3):
    CASES += [
        (f"burst16-lru-{seed}", bursts(seed, 48, 16), HostTierConfig(tokens=960), 800),
        (
            f"burst16-arc-{seed}",
            bursts(seed + 10, 48, 16),
            HostTierConfig(tokens=960, policy="arc"),
            800,
        ),
        (
            f"burst8-chunk2-t2-{seed}",
            bursts(seed + 20, 48, 8),
            HostTierConfig(tokens=1280, blocks_per_chunk=2, store_threshold=2),
            800,
        ),
        (
            f"burst24-output-{seed}",
            bursts(seed + 30, 48, 24),
            HostTierConfig(tokens=960, offload_prompt_only=False),
            800,
        ),
        (f"burst32-small-{seed}", bursts(seed + 40, 64, 32), HostTierConfig(tokens=640), 480),
    ]


def ours(stream: Stream | Bursts, tier: HostTierConfig, device_tokens: int) -> dict[str, list[int]]:
    engine = tier_engine("apc", kv_tokens=device_tokens, **dataclasses.asdict(tier))
    out: dict[str, list[int]] = {}
    k = 0
    entries: list[tuple[Any, ...]] = list(stream)
    while k < len(entries):
        if len(entries[k]) == 3:  # one request alone
            rid, prompt, output = entries[k]
            out[rid] = list(tiers(send(engine, rid, prompt, output)))
            k += 1
            continue
        wave = [entry for entry in entries[k:] if entry[3] == entries[k][3]]
        for rec in send_together(engine, [(rid, p, o) for rid, p, o, _ in wave]):
            out[rec.request_id] = list(tiers(rec))
        k += len(wave)
    return out


def upstream_runs() -> list[dict]:
    runs = []
    for _, stream, tier, device in CASES:
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
            }
        )
    return runs


def test_per_request_tiers_equal_vllms_scheduler_with_the_offloading_connector(tmp_path):
    if not VLLM_PYTHON.is_file() or not MODEL.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs .venv-vllm and its model folder (bash scripts/setup_vllm.sh)")
        pytest.skip("no .venv-vllm (bash scripts/setup_vllm.sh)")
    result = tmp_path / "upstream.json"
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), str(result)],
        input=json.dumps(upstream_runs()),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    upstream = json.loads(result.read_text())
    host_total = 0
    assert len(upstream) == len(CASES)
    for (name, stream, tier, device), theirs in zip(CASES, upstream):
        mine = ours(stream, tier, device)
        assert mine == theirs, f"{name}: " + ", ".join(
            f"{rid} ours {mine[rid]} vllm {theirs.get(rid)}"
            for rid in mine
            if mine[rid] != theirs.get(rid)
        )
        if name.startswith("burst"):
            host_total += sum(h for _, h in mine.values())
    assert host_total > 0  # the bursts loaded from the host tier
