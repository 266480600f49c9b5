"""Tenants are isolated by their salt, shown on the full engine (tiny model, torch backend).

A salt is a cache namespace (vLLM cache_salt in block 0's hash, SGLang's per-salt tree branch):
a tenant replaying another tenant's exact prompt reuses nothing, salted and unsalted requests
never share, and the same salt shares as usual. Shown three ways for both designs: the recorded
cached_tokens, `cache.match` after the run, and the physical blocks every running request holds
at every step. No workload generator sets `salt` yet, so this is tested at the engine level.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from engines.batch import run_batch
from engines.cache import designs
from engines.request import GenerationRequest
from engines.sequence import Sequence
from tests.engine_util import by_id, make_engine

CACHES = {d.name: d.block_size for d in designs()}  # design -> block/page size of its preset
PROMPT_LEN, OUTPUT_LEN = 49, 6


def shared_prompt(seed: int = 0) -> tuple[int, ...]:
    return tuple(np.random.default_rng(seed).integers(1, 1024, PROMPT_LEN).tolist())


def requests_for(salts: list[str | None], prompt: tuple[int, ...]) -> list[GenerationRequest]:
    script = tuple(range(100, 100 + OUTPUT_LEN))
    return [
        GenerationRequest(f"r{i}", prompt, OUTPUT_LEN, scripted_output_ids=script, salt=salt)
        for i, salt in enumerate(salts)
    ]


def reusable(block_size: int) -> int:
    """A replay reuses the prompt minus its last token, aligned down to the block."""
    return (PROMPT_LEN - 1) // block_size * block_size


@pytest.mark.parametrize("cache", list(CACHES))
def test_replaying_another_tenants_prompt_reuses_nothing(cache):
    # One request at a time, all with the same prompt: only the namespace differs.
    salts = [None, "tenant-a", "tenant-b", "tenant-a", None, "tenant-b"]
    engine = make_engine(cache, max_num_seqs=1)
    records = by_id(run_batch(engine, requests_for(salts, shared_prompt())))
    hit = reusable(CACHES[cache])
    assert [records[f"r{i}"].cached_tokens for i in range(len(salts))] == [0, 0, 0, hit, hit, hit]


@pytest.mark.parametrize("cache", list(CACHES))
def test_match_after_the_run_sees_only_its_own_namespace(cache):
    prompt = shared_prompt(1)
    engine = make_engine(cache)
    run_batch(engine, requests_for(["tenant-a"], prompt))

    def matched(salt: str | None) -> int:
        seq = Sequence(f"probe-{salt}", list(prompt), PROMPT_LEN, OUTPUT_LEN, salt=salt)
        return engine.cache.match(seq).num_tokens

    assert matched("tenant-a") == reusable(CACHES[cache])
    assert matched("tenant-b") == 0
    assert matched(None) == 0
    assert matched("tenant-a ") == 0  # salts compare exactly


def held_blocks_per_step(engine) -> list[dict[str, tuple[str | None, set[int]]]]:
    """Spy on the executor: before each step, the blocks every running request holds."""
    steps: list[dict[str, tuple[str | None, set[int]]]] = []
    execute = engine.executor.execute

    def spy(plan):
        seqs = {s.seq_id: s for s in engine.loop.running}
        seqs.update({item.seq.seq_id: item.seq for item in plan.scheduled})
        steps.append({sid: (s.salt, set(engine.cache.block_table(s))) for sid, s in seqs.items()})
        return execute(plan)

    engine.executor.execute = spy
    return steps


@pytest.mark.parametrize("cache", list(CACHES))
def test_concurrent_tenants_never_hold_the_same_block(cache):
    # Three tenants, three requests each, one identical prompt, interleaved; a small step budget
    # admits them over several steps, so later ones can reuse what earlier ones computed.
    salts = ["tenant-a", "tenant-b", None] * 3
    engine = make_engine(cache, max_num_batched_tokens=64)
    steps = held_blocks_per_step(engine)
    records = by_id(run_batch(engine, requests_for(salts, shared_prompt(2))))

    shared_within_tenant = False
    for held in steps:
        by_salt: dict[str | None, list[set[int]]] = defaultdict(list)
        for salt, blocks in held.values():
            by_salt[salt].append(blocks)
        tenants = list(by_salt)
        for i, a in enumerate(tenants):
            for b in tenants[i + 1 :]:
                for blocks_a in by_salt[a]:
                    for blocks_b in by_salt[b]:
                        assert not blocks_a & blocks_b, f"{a!r} and {b!r} hold the same block"
        for tables in by_salt.values():
            for i, blocks in enumerate(tables):
                shared_within_tenant |= any(blocks & other for other in tables[i + 1 :])
    assert shared_within_tenant  # the same salt does share physical blocks
    for salt in set(salts):
        cached = [records[f"r{i}"].cached_tokens for i, s in enumerate(salts) if s == salt]
        # later ones reuse what was computed by then (radix: possibly one chunk of the prompt)
        later_ok = all(0 < c <= reusable(CACHES[cache]) for c in cached[1:])
        assert cached[0] == 0 and later_ok, (salt, cached)
