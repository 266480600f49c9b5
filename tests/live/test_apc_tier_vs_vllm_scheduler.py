"""apc with a host tier against vLLM's own async Scheduler with the OffloadingConnector, driven in
the vLLM venv (tests/live/vllm_offload_scheduler_driver.py; only the transfer engine is a stub):
the same request streams must give every request the same device and host cached tokens
(docs/tiers.md §2), preemptions and tokens computed again after them (a re-admission's hits). The streams are the hand-made ones of tests/unit/test_apc_tiers.py and
generated ones of prompts sharing prefixes, one request at a time, and generated bursts (requests
sent together, so loads wait, preemptions and releases interleave with other requests' steps).

Needs .venv-vllm (scripts/setup_vllm.sh): skipped without it, a failure under CI=true.
"""

from __future__ import annotations

import dataclasses

from engines.cache.tiers import HostTierConfig
from engines.records import RequestRecord
from tests.apc_storage_streams import OUT, Stream, generated
from tests.tier_streams import Prompts, tier_engine, tiers
from tests.vllm_offload_reference import (
    Bursts,
    bursts,
    differences,
    driver_run,
    requeued,
    run_vllm,
    send_stream,
)


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
# Requests finishing in the same step: vLLM refreshes their chunks in the order of a Python set of
# request ids, which the driver fixes to the finish order (vllm_offload_scheduler_driver.py
# FinishOrder); under 3 of 4 hash seeds this stream gave g17 another host hit before it did.
# Its g1 is also preempted after its decodes and admitted again: it finds the block its last
# processed token completed on the device (vllm_loads.py `cache_sampled`) and computes one token.
CASES.append(("burst16-finish-order", bursts(51, 48, 16), HostTierConfig(tokens=480), 480))
# the other stream of the probe of docs/tiers.md §10.1 that split on that order (7 requests)
CASES.append(
    (
        "burst8-arc-chunk2-finish-order",
        bursts(51, 48, 8),
        HostTierConfig(tokens=640, policy="arc", blocks_per_chunk=2),
        480,
    )
)
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


def vllm_counts(rec: RequestRecord) -> list[int]:
    """A record as the driver reports vLLM's: device, host, preemptions, tokens computed again."""
    return [*tiers(rec), *requeued(rec)]


def ours(stream: Stream | Bursts, tier: HostTierConfig, device_tokens: int) -> dict[str, list[int]]:
    engine = tier_engine("apc", kv_tokens=device_tokens, **dataclasses.asdict(tier))
    return send_stream(engine, stream, vllm_counts)


def test_per_request_tiers_equal_vllms_scheduler_with_the_offloading_connector(tmp_path):
    runs = [driver_run(stream, tier, device) for _, stream, tier, device in CASES]
    upstream = run_vllm(runs, tmp_path / "upstream.json")
    host_total = preemptions = 0
    for (name, stream, tier, device), theirs in zip(CASES, upstream, strict=True):
        mine = ours(stream, tier, device)
        assert mine == theirs, differences(name, mine, theirs)
        if name.startswith("burst"):
            host_total += sum(counts[1] for counts in mine.values())
            preemptions += sum(counts[2] for counts in mine.values())
    assert host_total > 0  # the bursts loaded from the host tier
    assert preemptions > 0  # and preempted requests
