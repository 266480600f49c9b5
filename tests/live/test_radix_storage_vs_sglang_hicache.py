"""radix with a host tier and a storage tier against SGLang 0.5.23's own HiCache with its file
storage backend (`--hicache-storage-backend file`, its scheduler, tree, host pool, controller
and prefetch threads; stubs in tests/fixtures/sglang_hicache_stubs): the same requests, one at a
time, must give every request the same device, host and storage cached tokens
(docs/tiers.md §10.2). The host pool is two device pools (`--hicache-ratio 2`), so eight fillers
push a prompt out of both. Streams: a prompt re-sent after that, storage hits of 255 and 256
tokens (under and at the prefetch threshold), storage continuing a device hit and a host hit, a
conversation's second turn, and generated prompts sharing heads.

Opt-in like tests/live/test_radix_tier_vs_sglang_hicache.py: skipped without .venv-sglang. One
server per case (a few minutes each).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engines.build import build_engine
from engines.cache.storage_tier import StorageTierConfig
from engines.cache.tiers import HostTierConfig
from engines.config import EngineConfig
from engines.model.presets import PRESETS
from engines.records import RequestRecord
from tests.live.sglang_hicache import VENV_PYTHON, generate, hicache_server, host_pool_tokens
from tests.tier_streams import TICKS, Prompts, send

pytestmark = pytest.mark.sglang

KV_TOKENS = 640
OUT = 4

Send = Callable[[str, tuple[int, ...], int], tuple[int, ...]]


def streams(p: Prompts, rng: np.random.Generator, send_one: Send) -> None:
    """Every stream, one request at a time; `send_one` returns the request's output ids."""

    def fill(tag: str, n: int = 8) -> None:
        for i in range(n):
            send_one(f"{tag}-f{i}", p.tokens(300), OUT)

    a = p.tokens(300)  # gone from device and host, then re-sent
    send_one("a1", a, OUT)
    fill("a")
    send_one("a2", a, OUT)
    send_one("a3", a, OUT)
    c, d = p.tokens(256), p.tokens(257)  # spans of 255 and 256 tokens past device + host
    send_one("c1", c, OUT)
    send_one("d1", d, OUT)
    fill("cd")
    send_one("c2", c, OUT)
    send_one("d2", d, OUT)
    e = p.tokens(500)  # a head back on the device, the rest only in storage
    send_one("e1", e, OUT)
    fill("e")
    send_one("e-head", e[:100] + p.tokens(50), OUT)
    send_one("e2", e, OUT)
    f = p.tokens(500)  # a head in the host pool, the rest only in storage
    send_one("f1", f, OUT)
    fill("f")
    send_one("f-head", f[:100] + p.tokens(50), OUT)
    fill("f-dev", 2)
    send_one("f2", f, OUT)
    t1 = p.tokens(300)  # a conversation's second turn
    reply = send_one("t1", t1, 24)
    fill("t")
    send_one("t2", t1 + reply + p.tokens(30), OUT)
    heads = [p.tokens(int(rng.integers(100, 400))) for _ in range(4)]
    for i in range(16):  # generated: four families sharing heads, some long gone
        head = heads[int(rng.integers(0, 4))]
        tail = tuple(rng.integers(1, 30000, int(rng.integers(10, 200))).tolist())
        send_one(f"g{i}", head + tail, int(rng.integers(2, 9)))


CASES = [
    ("write_through", "wait_complete"),
    ("write_back", "wait_complete"),
    ("write_through", "timeout"),
]


@pytest.mark.parametrize(("write_policy", "prefetch_policy"), CASES)
def test_per_request_tiers_equal_sglangs_storage_backend(write_policy, prefetch_policy, tmp_path):
    theirs = compare(write_policy, prefetch_policy, tmp_path)
    assert any(storage for _, _, storage in theirs.values())  # storage served some
    assert theirs["c2"][2] == 0 and theirs["d2"][2] == 256  # the threshold, on SGLang's side


def compare(write_policy: str, prefetch_policy: str, tmp_path: Path):
    """Run the streams on SGLang's server, then the same requests with its outputs on
    engine=radix with the host pool's logged size and the same policies; every request's
    (device, host, storage) cached tokens must be equal. Returns SGLang's per request."""
    if not VENV_PYTHON.exists():
        pytest.skip("SGLang is opt-in: run `bash scripts/setup_sglang.sh` to make .venv-sglang")
    log, store = tmp_path / "sglang.log", tmp_path / "storage"
    store.mkdir()
    extra = (
        "--hicache-storage-backend", "file", "--file-storage-path", str(store),
        "--hicache-storage-prefetch-policy", prefetch_policy,
    )  # fmt: skip
    served: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, int, int]]] = []
    with hicache_server(KV_TOKENS, write_policy, log, 2.0, extra) as url:

        def send_one(rid: str, prompt: tuple[int, ...], n: int) -> tuple[int, ...]:
            reply = generate(url, prompt, n)
            served.append(
                (rid, prompt, reply.output_ids, (reply.device, reply.host, reply.storage))
            )
            return reply.output_ids

        streams(Prompts(11), np.random.default_rng(11), send_one)
    engine = storage_engine(host_pool_tokens(log), write_policy, prefetch_policy)
    ours = {rid: tiers3(send(engine, rid, prompt, out)) for rid, prompt, out, _ in served}
    theirs = {rid: split for rid, _, _, split in served}
    assert ours == theirs, ", ".join(
        f"{rid} ours {ours[rid]} sglang {theirs[rid]}" for rid in ours if ours[rid] != theirs[rid]
    )
    return theirs


def storage_engine(host_tokens: int, write_policy: str, prefetch_policy: str):
    cfg = EngineConfig(
        cache="radix",
        block_size=1,
        kv_capacity_tokens=KV_TOKENS,
        max_num_batched_tokens=512,
        backend="torch",
        host_tier=HostTierConfig(tokens=host_tokens, write_policy=write_policy),
        storage_tier=StorageTierConfig(enabled=True, prefetch_policy=prefetch_policy),
    )
    cfg.validate()
    return build_engine(
        cfg, PRESETS.get("tiny"), executor="simulated", device="cpu", hardware=TICKS
    )


def tiers3(rec: RequestRecord) -> tuple[int, int, int]:
    host, storage = rec.host_cached_tokens, rec.storage_cached_tokens
    return rec.cached_tokens - host - storage, host, storage
