"""apc's host chunk store (engines/cache/apc/host_store.py) against vLLM's own CPU offloading
manager and policies, driven in the vLLM venv (tests/live/vllm_offload_manager_driver.py): the same
operation streams, as the OffloadingConnector's scheduler side issues them, must give the same
lookups and the same stored keys, per operation (docs/tiers.md §2.2, §2.3).

Needs .venv-vllm (scripts/setup_vllm.sh): skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engines.cache.apc.host_store import HostChunkStore

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = Path(__file__).with_name("vllm_offload_manager_driver.py")

Op = tuple[str, str, list[bytes], int]


def chain(family: int, length: int, branch: int) -> list[bytes]:
    """Chunk keys of a prompt: `family`'s shared head for 4 chunks, then its own `branch`."""
    keys, h = [], b"root"
    for i in range(length):
        part = (family, i) if i < 4 else (family, branch, i)
        h = hashlib.sha256(h + repr(part).encode()).digest()[:8]
        keys.append(h)
    return keys


def stream(seed: int, num_requests: int = 60) -> list[Op]:
    """Requests as the connector drives the manager: a lookup past a random device hit, a load of
    the hit, growing store offers (written a while later), a finish; up to three at once."""
    rng = np.random.default_rng(seed)
    ops: list[Op] = []
    active: dict[str, dict] = {}
    started = 0
    while started < num_requests or active:
        if started < num_requests and len(active) < 3 and rng.random() < 0.4:
            rid = f"r{started}"
            started += 1
            keys = chain(int(rng.integers(0, 4)), int(rng.integers(2, 12)), int(rng.integers(0, 3)))
            device = int(rng.integers(0, 3))
            ops.append(("lookup", rid, keys[device:], device))
            active[rid] = {"keys": keys, "next": 0}
            continue
        if not active:
            continue
        rid = list(active)[int(rng.integers(0, len(active)))]
        req = active[rid]
        if req["next"] < len(req["keys"]) and rng.random() < 0.7:
            end = min(len(req["keys"]), req["next"] + int(rng.integers(1, 5)))
            ops.append(("offer", rid, req["keys"][req["next"] : end], req["next"]))
            req["next"] = end
        else:
            ops.append(("finish", rid, [], -1))
            del active[rid]
    return ops


def run_ours(ops: list[Op], num_chunks: int, policy: str, threshold: int) -> list[object]:
    """Our store through the same operations; a lookup's hit is loaded as the connector loads."""
    store = HostChunkStore(num_chunks, policy, threshold)
    out: list[object] = []
    for op, rid, keys, _ in ops:
        if op == "lookup":
            out.append(store.lookup(keys))
        elif op == "load":  # started and completed, as the driver does upstream's
            store.load(rid, keys)
            store.complete_load(keys)
            out.append(None)
        elif op == "offer":
            stored = store.offer(rid, keys)
            out.append(None if stored is None else [k.hex() for k in stored])
        elif op == "complete":
            store.complete(keys)
            out.append(None)
        else:
            store.finish_request(rid)
            out.append(None)
    return out


def with_loads_and_writes(ops: list[Op], num_chunks: int, policy: str, threshold: int) -> list[Op]:
    """The stream as the connector issues it: after each lookup the load of what it hit (offers
    then start past the load, as the connector never offers a loaded chunk again), and after
    each offer the completion of what the previous offer stored (the worker writes a step late).
    Hits are computed with our store; the comparison checks every answer against upstream's."""
    store = HostChunkStore(num_chunks, policy, threshold)
    full: list[Op] = []
    writing: list[tuple[str, list[bytes]]] = []  # (the request that stored them, keys)
    loaded_to: dict[str, int] = {}
    for op, rid, keys, first in ops:
        if op == "offer" and rid in loaded_to:
            cut = max(0, loaded_to[rid] - first)
            keys, first = keys[cut:], first + cut
            if not keys:
                continue
        if op == "offer":  # the previous offer's stores were written meanwhile
            for owner, done in writing:
                full.append(("complete", owner, done, -1))
                store.complete(done)
        full.append((op, rid, keys, first))
        if op == "lookup":
            hits = store.lookup(keys)
            if hits:
                full.append(("load", rid, keys[:hits], first))
                store.load(rid, keys[:hits])
                store.complete_load(keys[:hits])
                loaded_to[rid] = first + hits
        elif op == "offer":
            stored = store.offer(rid, keys)
            writing = [(rid, stored)] if stored else []
        elif op == "finish":
            store.finish_request(rid)
    return full


CASES = [
    (policy, threshold, num_chunks, seed)
    for policy in ("lru", "arc")
    for threshold in (1, 2)
    for num_chunks, seed in ((8, 0), (20, 1), (64, 2))
]


def test_our_host_store_answers_as_vllms_cpu_manager():
    if not VLLM_PYTHON.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs .venv-vllm (bash scripts/setup_vllm.sh)")
        pytest.skip("no .venv-vllm (bash scripts/setup_vllm.sh)")
    streams = [
        with_loads_and_writes(stream(seed), n, policy, threshold)
        for policy, threshold, n, seed in CASES
    ]
    spec = [
        {
            "num_chunks": n,
            "policy": policy,
            "store_threshold": threshold,
            "ops": [[op, rid, [k.hex() for k in keys], first] for op, rid, keys, first in ops],
        }
        for (policy, threshold, n, _), ops in zip(CASES, streams)
    ]
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(DRIVER)],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    upstream = json.loads(proc.stdout)
    for (policy, threshold, n, seed), ops, theirs in zip(CASES, streams, upstream):
        ours = run_ours(ops, n, policy, threshold)
        stored = sum(len(r) for op, r in zip(ops, ours) if op[0] == "offer" and r)
        hits = sum(r for op, r in zip(ops, ours) if op[0] == "lookup" and r)
        assert stored > 0 and hits > 0, (policy, threshold, n)  # the stream exercises both
        for i, (op, a, b) in enumerate(zip(ops, ours, theirs)):
            assert a == b, (
                f"{policy} t{threshold} n{n} seed{seed} op {i} {op[0]} {op[1]}: {a} != {b}"
            )
