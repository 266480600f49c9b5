"""radix with a host tier against SGLang 0.5.23's own HiCache (its scheduler, unified radix tree,
host pool and cache controller, run as a server with three stubs: tests/live/sglang_hicache.py):
the same requests, one at a time, must give every request the same device and host cached tokens
(docs/tiers.md §3.5), under each write policy. Streams: a prompt re-sent after device eviction,
one seen twice before eviction (what write_through_selective needs), a prompt under the load-back
threshold, a conversation's second turn, and generated prompts sharing prefixes; with a 1 GB host
pool (never full) and, after eight more prompts, with one or two times the device pool
(`--hicache-ratio`), which these streams overflow.

Opt-in, like tests/live/test_sglang_server.py: skipped without .venv-sglang (its CPU setup uses
placeholder kernel packages and is not part of CI). One server per write policy (a few minutes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.live.sglang_hicache import VENV_PYTHON, generate, hicache_server, host_pool_tokens
from tests.tier_streams import Prompts, send, tier_engine, tiers

pytestmark = pytest.mark.sglang

KV_TOKENS = 640  # device tokens on both sides (--max-total-tokens; engine.kv_capacity_tokens)
OUT = 4

Send = Callable[[str, tuple[int, ...], int], tuple[int, ...]]


def streams(p: Prompts, rng: np.random.Generator, send_one: Send) -> None:
    """Every stream, one request at a time; `send_one` returns the request's output ids."""

    def fill(tag: str, n: int = 3) -> None:
        for i in range(n):
            send_one(f"{tag}-f{i}", p.tokens(300), OUT)

    a = p.tokens(300)  # re-sent after device eviction
    send_one("a1", a, OUT)
    fill("a")
    send_one("a2", a, OUT)
    b = p.tokens(300)  # seen twice while cached, then evicted
    send_one("b1", b, OUT)
    send_one("b2", b, OUT)
    fill("b")
    send_one("b3", b, OUT)
    c = p.tokens(8)  # a host hit under the load-back threshold
    send_one("c1", c, OUT)
    fill("c")
    send_one("c2", c, OUT)
    t1 = p.tokens(300)  # a conversation's second turn, after eviction
    reply = send_one("t1", t1, 24)
    fill("t")
    send_one("t2", t1 + reply + p.tokens(30), OUT)
    heads = [p.tokens(int(rng.integers(40, 200))) for _ in range(5)]
    for i in range(30):  # generated: five families sharing heads
        head = heads[int(rng.integers(0, 5))]
        tail = tuple(rng.integers(1, 30000, int(rng.integers(10, 200))).tolist())
        send_one(f"g{i}", head + tail, int(rng.integers(2, 9)))


def evicting(p: Prompts, rng: np.random.Generator, send_one: Send) -> None:
    """Streams whose KV exceeds device plus host (a pool of one or two device pools): eight
    200-token prompts then five of them again, newest first; then every stream of `streams`."""
    singles = [p.tokens(200) for _ in range(8)]
    for i, prompt in enumerate(singles):
        send_one(f"s{i}", prompt, OUT)
    for i in (7, 5, 3, 1, 0):
        send_one(f"s{i}r", singles[i], OUT)
    streams(p, rng, send_one)


POLICIES = ["write_through", "write_through_selective", "write_back"]


@pytest.mark.parametrize("write_policy", POLICIES)
def test_per_request_tiers_equal_sglangs_hicache(write_policy, tmp_path):
    _, theirs = compare(write_policy, tmp_path, None, streams)
    assert any(host for _, host in theirs.values())  # the streams reached the host tier


# --hicache-ratio: SGLang sizes the pool int(640 x ratio) tokens plus one padding page, all usable
# (mem_cache/pool_host/base.py): 641 tokens (writes fail while the device holds what the host
# does) and 1281
@pytest.mark.parametrize(
    ("host_ratio", "write_policy"),
    [
        (1.0, "write_through"),  # SGLang serves no host hit here: each is a miss on both sides
        (1.0, "write_through_selective"),
        (1.0, "write_back"),
        (2.0, "write_through"),
        (2.0, "write_through_selective"),
        (2.0, "write_back"),
    ],
)
def test_per_request_tiers_equal_with_a_host_pool_that_evicts(host_ratio, write_policy, tmp_path):
    engine, theirs = compare(write_policy, tmp_path, host_ratio, evicting)
    assert engine.loop.scheduler.cache.host_stats().evicted > 0  # the host pool did evict
    if host_ratio > 1:
        assert any(host for _, host in theirs.values())


def compare(
    write_policy: str,
    tmp_path: Path,
    host_ratio: float | None,
    stream: Callable[[Prompts, np.random.Generator, Send], None],
):
    """Run `stream` on SGLang's server, then the same requests with its outputs on engine=radix
    with the host pool's logged size; every request's (device, host) cached tokens must be
    equal. Returns the project's engine and SGLang's (device, host) per request."""
    if not VENV_PYTHON.exists():
        pytest.skip("SGLang is opt-in: run `bash scripts/setup_sglang.sh` to make .venv-sglang")
    log = tmp_path / "sglang.log"
    served: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, int]]] = []
    with hicache_server(KV_TOKENS, write_policy, log, host_ratio) as url:

        def send_one(rid: str, prompt: tuple[int, ...], n: int) -> tuple[int, ...]:
            reply = generate(url, prompt, n)
            served.append((rid, prompt, reply.output_ids, (reply.device, reply.host)))
            return reply.output_ids

        stream(Prompts(7), np.random.default_rng(7), send_one)
    host_tokens = host_pool_tokens(log)
    engine = tier_engine(
        "radix", kv_tokens=KV_TOKENS, tokens=host_tokens, write_policy=write_policy
    )
    ours = {rid: tiers(send(engine, rid, prompt, out)) for rid, prompt, out, _ in served}
    theirs = {rid: split for rid, _, _, split in served}
    assert ours == theirs, ", ".join(
        f"{rid} ours {ours[rid]} sglang {theirs[rid]}" for rid in ours if ours[rid] != theirs[rid]
    )
    return engine, theirs
