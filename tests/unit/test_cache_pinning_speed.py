"""Fidelity pin for cache speed work: per-request cached tokens, preemptions, recomputed tokens and
simulated first-token times, plus eviction counts, of every upstream pairing on a few workloads.

The expected values in tests/data/cache_pinning.json were recorded from the implementation before
the bookkeeping was made faster; any optimisation of the trees, allocators, hashing or block pool
must reproduce them exactly. Workloads run in-process on the simulated executor (deterministic
times), at tight KV capacities so that eviction and preemption paths run. To re-record after a
deliberate behaviour change: `python tests/unit/test_cache_pinning_speed.py --record`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from engines.build import build_engine
from harness.client.arrivals import with_arrivals
from harness.client.inprocess import drive
from harness.config.schema import (
    CONF_DIR,
    RunConfig,
    to_schema,
)
from harness.config.tokenspace import token_space_for
from workloads.base import generate

DATA = Path(__file__).parents[1] / "data" / "cache_pinning.json"
SIM = ("executor=simulated", "hardware=h100_llama3_70b_fp8")
# The radix arms were recorded under SGLang's non-overlap loop, which they name; radix_overlap
# pins the preset's default, SGLang's overlap loop (recorded when it became the default).
RADIX = ("engine=radix", "engine.overlap=false")
ARMS = {  # every upstream pairing the harness offers, plus the radix eviction policies
    "apc": ("engine=apc",),
    "apc_classic": ("engine=apc", "engine.free_order=classic"),
    "radix": RADIX,
    "radix_lpm": (*RADIX, "engine.policy=lpm"),
    "radix_p16": (*RADIX, "engine.block_size=16"),
    "radix_lfu": (*RADIX, "engine.eviction_policy=lfu"),
    "radix_slru": (*RADIX, "engine.eviction_policy=slru"),
    "radix_tlru": (*RADIX, "engine.eviction_policy=tlru"),
    "radix_priority": (*RADIX, "engine.eviction_policy=priority"),
    "radix_overlap": ("engine=radix",),
}
SMALL = ("engine.debug_checks=true",)  # integrity checks after every step on the small workloads
WORKLOADS = {
    "multiturn_tight": (
        *SMALL,
        "workload=multiturn",
        "workload.num_users=8",
        "workload.num_rounds=4",
        "engine.kv_capacity_tokens=2048",
        "engine.max_num_seqs=8",
    ),
    "system_prompt_tenants": (
        *SMALL,
        "workload=system_prompt",
        "workload.num_tenants=2",
        "engine.kv_capacity_tokens=3072",
        "engine.max_num_seqs=6",
    ),
    "parallel_tight": (*SMALL, "workload=parallel", "engine.kv_capacity_tokens=1024"),
    "mooncake_prefix": (  # the trace_h100 settings on the first 80 requests, 131,072 KV tokens
        "workload=mooncake_conversation",
        "workload.max_requests=80",
        "model.max_position_embeddings=131072",
        "load.slowdown=8",
        "engine.max_num_batched_tokens=8192",
        "engine.max_num_seqs=256",
        "engine.kv_capacity_tokens=131072",
    ),
}
LARGE_ARMS = ("apc", "radix", "radix_p16", "radix_overlap")  # the long trace prefix: suites' arms
CASES = [(w, a) for w in WORKLOADS for a in ARMS if w != "mooncake_prefix" or a in LARGE_ARMS]


def observe(workload: str, arm: str) -> dict:
    """Run one case and return what the pin compares."""
    overrides = [*SIM, *WORKLOADS[workload], *ARMS[arm]]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="pin"):
        cfg = to_schema(compose(config_name="config", overrides=overrides), RunConfig)
    requests = generate(cfg.workload, cfg.seed, token_space_for(cfg.model))
    requests = with_arrivals(requests, cfg.load, cfg.seed)
    engine = build_engine(
        cfg.engine, cfg.model, executor=cfg.executor, device=cfg.device, hardware=cfg.hardware
    )
    drive(engine, requests)
    stats = engine.cache.stats()
    return {
        "requests": {
            r.request_id: [r.cached_tokens, r.num_preemptions, r.recomputed_tokens, r.first_token_s]
            for r in engine.records
        },
        "num_evictions": stats.num_evictions,
        "evicted_tokens": stats.evicted_tokens,
    }


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads(DATA.read_text())


@pytest.mark.parametrize("workload,arm", CASES)
def test_cache_decisions_are_pinned(workload, arm, expected):
    want = expected[f"{workload}/{arm}"]
    got = observe(workload, arm)
    assert (got["num_evictions"], got["evicted_tokens"]) == (
        want["num_evictions"],
        want["evicted_tokens"],
    )
    assert got["requests"].keys() == want["requests"].keys()
    for rid, (cached, preempted, recomputed, first_token_s) in want["requests"].items():
        g = got["requests"][rid]
        assert g[:3] == [cached, preempted, recomputed], rid
        assert math.isclose(g[3], first_token_s, rel_tol=1e-12, abs_tol=1e-12), rid


def test_pinned_workloads_exercise_evictions_preemptions_and_hits(expected):
    """The pin is only as strong as the paths it runs: hits, evictions and preemptions all occur."""
    cases = [expected[f"{w}/{a}"] for w, a in CASES]
    assert all(c["num_evictions"] > 0 for c in cases)
    assert all(any(r[0] > 0 for r in c["requests"].values()) for c in cases)
    assert sum(r[1] for c in cases for r in c["requests"].values()) > 0


def record() -> None:
    DATA.parent.mkdir(parents=True, exist_ok=True)
    out = {f"{w}/{a}": observe(w, a) for w, a in sorted(CASES)}
    lines = []  # one line per case: small diffs when a deliberate change re-records one
    for name, case in out.items():
        lines.append(f"{json.dumps(name)}: {json.dumps(case, sort_keys=True)}")
    DATA.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"recorded {len(out)} cases into {DATA}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/unit/test_cache_pinning_speed.py --record")
    record()
