"""Runs under the vLLM venv's python (tests/live/test_apc_tier_vs_vllm_manager.py spawns it): applies a
stream of host-tier operations to vLLM's own CPU offloading manager (`vllm/v1/kv_offload/cpu/
manager.py` with its LRU or ARC policy) and prints what each operation returned, as JSON.

stdin: a list of streams {"num_chunks", "policy", "store_threshold", "ops": [[op, request,
[hex keys], index of the first key in the request's chain (-1: none)], ...]} with op lookup |
load | offer | complete | finish. stdout: per stream, one result per op (lookup: leading ready keys, or null
when one is being written; offer: the keys stored, or null; the others: null).
"""

from __future__ import annotations

import json
import sys

from vllm.v1.kv_offload.base import LookupResult, ReqContext
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager


def main() -> None:
    json.dump([run(spec) for spec in json.load(sys.stdin)], sys.stdout)


def run(spec: dict) -> list[object]:
    manager = CPUOffloadingManager(
        num_chunks=spec["num_chunks"],
        cache_policy=spec["policy"],
        store_threshold=spec["store_threshold"],
    )
    contexts: dict[str, ReqContext] = {}
    out: list[object] = []
    for op, rid, hex_keys, first in spec["ops"]:
        keys = [bytes.fromhex(k) for k in hex_keys]
        ctx = contexts.get(rid)
        if ctx is None:
            ctx = contexts[rid] = ReqContext(req_id=rid)
            manager.on_new_request(ctx)
        # the connector records each chunk's end position in the request (prefix order)
        for i, key in enumerate(keys if first >= 0 else ()):
            ctx.set_offload_key_position(key, first + i + 1)
        try:
            out.append(apply(manager, op, keys, ctx))
        except AssertionError as exc:  # upstream refuses the operation: the stream ends here
            out.append(f"refused: {exc}")
            break
        if op == "finish":
            del contexts[rid]
    return out


def apply(manager: CPUOffloadingManager, op: str, keys: list[bytes], ctx: ReqContext) -> object:
    if op == "lookup":
        hits = 0
        for key in keys:
            result = manager.lookup(key, ctx)
            if result is LookupResult.HIT_PENDING:
                return None
            if result is not LookupResult.HIT:
                break
            hits += 1
        return hits
    if op == "load":  # the connector's load, completed by the worker
        manager.prepare_load(keys, ctx)
        manager.complete_load(keys, ctx)
        return None
    if op == "offer":
        stored = manager.prepare_store(keys, ctx)
        return None if stored is None else [k.hex() for k in stored.keys_to_store]
    if op == "complete":
        manager.complete_store(keys, ctx)
        return None
    if op == "finish":
        manager.on_request_finished(ctx)
        return None
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    main()
