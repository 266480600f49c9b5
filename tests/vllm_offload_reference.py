"""What both apc tier reference tests share (tests/live/test_apc_tier_vs_vllm_scheduler.py for the
CPU tier, test_apc_storage_vs_vllm_tiering.py with the file-system tier behind it): burst streams,
the driver's run records, sending a stream to one of our engines wave by wave, and running vLLM's
own scheduler in the vLLM venv (tests/live/vllm_offload_scheduler_driver.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from engines.cache.tiers import HostTierConfig
from engines.engine import Engine
from engines.records import RequestRecord
from tests.apc_storage_streams import Stream, generated
from tests.tier_streams import send, send_together

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = ROOT / "tests" / "live" / "vllm_offload_scheduler_driver.py"
MODEL = ROOT / ".models" / "llama-rand-smollm2"  # only its config is read (no weights run)

# a burst stream: each request with its wave; a wave's requests are sent together
Bursts = list[tuple[str, tuple[int, ...], tuple[int, ...], int]]


def bursts(seed: int, num: int, size: int) -> Bursts:
    """`generated(seed, num)` sent in waves of `size` requests at once."""
    return [(rid, p, o, k // size) for k, (rid, p, o) in enumerate(generated(seed, num))]


def driver_run(
    stream: Stream | Bursts, tier: HostTierConfig, device_tokens: int, **extra: object
) -> dict[str, Any]:
    """One run record for the driver: vLLM's GPU blocks, its CPU tier's chunks and knobs."""
    bpc = tier.blocks_per_chunk
    return {
        "num_gpu_blocks": device_tokens // 16 + 1,
        "block_size": 16,
        "num_chunks": tier.tokens // (16 * bpc),
        "blocks_per_chunk": bpc,
        "policy": tier.policy,
        "store_threshold": tier.store_threshold,
        "offload_prompt_only": tier.offload_prompt_only,
        "model": str(MODEL),
        "requests": [[rid, list(p), list(o), *wave] for rid, p, o, *wave in stream],
        **extra,
    }


def requeued(rec: RequestRecord) -> list[int]:
    """What the driver reports after a request's tiers: its preemptions and the tokens it
    computed again after them (its re-admissions' hits, which its tiers, taken at the first
    admission, do not show)."""
    return [rec.num_preemptions, rec.recomputed_tokens]


def send_stream(
    engine: Engine, stream: Stream | Bursts, tiers: Callable[[RequestRecord], Sequence[int]]
) -> dict[str, list[int]]:
    """Each request's `tiers` once the stream ran: a request alone, or a wave sent together."""
    out: dict[str, list[int]] = {}
    entries: list[tuple[Any, ...]] = list(stream)
    k = 0
    while k < len(entries):
        if len(entries[k]) == 3:
            wave = [entries[k]]
            records = [send(engine, *entries[k])]
        else:
            wave = [entry for entry in entries[k:] if entry[3] == entries[k][3]]
            records = send_together(engine, [(rid, p, o) for rid, p, o, _ in wave])
        for rec in records:
            out[rec.request_id] = list(tiers(rec))
        k += len(wave)
    return out


def run_vllm(runs: list[dict[str, Any]], result: Path) -> list[dict[str, list[int]]]:
    """vLLM's per-request tiers for each run; skipped without the vLLM venv, a failure in CI."""
    if not VLLM_PYTHON.is_file() or not MODEL.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs .venv-vllm and its model folder (bash scripts/setup_vllm.sh)")
        pytest.skip("no .venv-vllm (bash scripts/setup_vllm.sh)")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER), str(result)],
        input=json.dumps(runs),
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    upstream = json.loads(result.read_text())
    assert len(upstream) == len(runs)
    return upstream


def differences(name: str, mine: dict[str, list[int]], theirs: dict[str, list[int]]) -> str:
    """The requests whose tiers differ, for an assertion message."""
    return f"{name}: " + ", ".join(
        f"{rid} ours {mine[rid]} vllm {theirs.get(rid)}"
        for rid in mine
        if mine[rid] != theirs.get(rid)
    )
