"""Random request streams through the full engine: no leak, no crash, the outputs of a cache-off run.

Hypothesis draws streams of prompts built from a few shared prefixes (so they hit), tenant salts,
n > 1 siblings sharing a prompt, and engine settings that force preemption (a KV pool barely larger
than one request) and chunked prefill (a small step budget), for both designs and their free
orders / eviction policies. Every step runs `check_integrity()` (engine.debug_checks); at idle
nothing may be held and the cache must flush. Decoding is greedy, so a wrong reuse shows.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.batch import run_batch
from engines.request import GenerationRequest
from tests.engine_util import make_engine

MAX_PREFIX, MAX_SUFFIX, MAX_OUTPUT = 40, 16, 8
MAX_NEED = MAX_PREFIX + MAX_SUFFIX + MAX_OUTPUT  # the largest request, in KV tokens
SALTS = (None, "tenant-a", "tenant-b")
FUZZ = settings(
    max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

request_specs = st.tuples(
    st.integers(0, 2),  # which shared prefix
    st.integers(0, MAX_PREFIX),  # how much of it
    st.integers(1, MAX_SUFFIX),  # own tokens after it
    st.integers(1, MAX_OUTPUT),  # output tokens
    st.integers(1, 3),  # n: siblings with the same prompt
    st.sampled_from(SALTS),
)
streams = st.tuples(st.integers(0, 2**16), st.lists(request_specs, min_size=1, max_size=6))
# Pools: barely one request (preemption), a few requests, plenty. Step budgets: chunked or not.
pressure = st.tuples(
    st.sampled_from([MAX_NEED, 2 * MAX_NEED, 4096]), st.sampled_from([16, 40, 512])
)


def build_requests(stream) -> list[GenerationRequest]:
    seed, specs = stream
    rng = np.random.default_rng(seed)
    prefixes = [rng.integers(1, 1024, MAX_PREFIX).tolist() for _ in range(3)]
    out = []
    for i, (which, prefix_len, suffix_len, output_len, n, salt) in enumerate(specs):
        prompt = tuple(prefixes[which][:prefix_len] + rng.integers(1, 1024, suffix_len).tolist())
        for j in range(n):
            rid = f"r{i}" if n == 1 else f"{j}_r{i}"
            out.append(
                GenerationRequest(
                    rid, prompt, output_len, parent_id=f"r{i}", sample_index=j, salt=salt
                )
            )
    return out


def outputs_and_idle_check(cache: str, requests, **config) -> dict[str, tuple[int, ...]]:
    engine = make_engine(cache, debug_checks=True, **config)
    records = run_batch(engine, requests)  # debug_checks: check_integrity() after every step
    assert sorted(r.request_id for r in records) == sorted(r.request_id for r in requests)
    engine.cache.check_integrity()
    assert engine.cache.usage().protected == 0, "KV still held at idle"
    assert engine.cache.reset(), "the cache refused to flush at idle"
    return {r.request_id: r.output_ids for r in records}


def reference(cache: str, requests, block_size: int) -> dict[str, tuple[int, ...]]:
    return outputs_and_idle_check(cache, requests, block_size=block_size, prefix_caching=False)


@FUZZ
@given(
    stream=streams,
    pool=pressure,
    block_size=st.sampled_from([4, 16]),
    free_order=st.sampled_from(["v024", "classic"]),
    policy=st.sampled_from(["fcfs", "lpm", "dfs-weight"]),
)
def test_apc_random_streams(stream, pool, block_size, free_order, policy):
    requests = build_requests(stream)
    capacity, budget = pool
    got = outputs_and_idle_check(
        "apc",
        requests,
        block_size=block_size,
        kv_capacity_tokens=capacity,
        max_num_batched_tokens=budget,
        free_order=free_order,
        policy=policy,
    )
    assert got == reference("apc", requests, block_size)


@FUZZ
@given(
    stream=streams,
    pool=pressure,
    page_size=st.sampled_from([1, 4]),
    eviction_policy=st.sampled_from(["lru", "lfu"]),
    policy=st.sampled_from(["fcfs", "lpm", "dfs-weight"]),
)
def test_radix_random_streams(stream, pool, page_size, eviction_policy, policy):
    requests = build_requests(stream)
    capacity, budget = pool
    got = outputs_and_idle_check(
        "radix",
        requests,
        block_size=page_size,
        kv_capacity_tokens=capacity,
        max_num_batched_tokens=budget,
        eviction_policy=eviction_policy,
        policy=policy,
    )
    assert got == reference("radix", requests, page_size)
