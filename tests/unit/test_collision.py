"""A hash collision in APC reuses the wrong KV unless `verify_tokens_on_hit` compares tokens.

APC trusts its block hashes (vLLM does: a cryptographic sha256 makes collisions negligible). With a
deliberately weak digest injected through the test-only hook, two different prompts collide block
by block: without verification the second one silently reuses the first one's KV and its greedy
output departs from a cache-off run; with verification the hit is refused and outputs match.
"""

from __future__ import annotations

import hashlib
import pickle

import numpy as np
import pytest

from engines.batch import run_batch
from engines.cache.apc.hashing import extra_hash_fn
from engines.config import EngineConfig
from engines.request import GenerationRequest
from tests.engine_util import by_id, make_engine

WEAK = "test_tokens_ignored"
PROMPT_LEN, OUTPUT_LEN, BLOCK = 48, 8, 16


def _tokens_ignored(obj) -> bytes:
    """Hashes (parent, extra keys) only: every prompt's block i gets the same key."""
    if isinstance(obj, tuple) and len(obj) == 3:
        parent, _block_token_ids, extra_keys = obj
        obj = (parent, extra_keys)
    return hashlib.sha256(pickle.dumps(obj)).digest()


def colliding_requests() -> list[GenerationRequest]:
    """A, then B (a different prompt of the same length), then A again; greedy decoding."""
    rng = np.random.default_rng(7)
    a, b = (tuple(rng.integers(1, 1024, PROMPT_LEN).tolist()) for _ in range(2))
    assert a != b
    return [
        GenerationRequest("a", a, OUTPUT_LEN),
        GenerationRequest("b", b, OUTPUT_LEN),
        GenerationRequest("a-again", a, OUTPUT_LEN),
    ]


def run(**overrides):
    # One request at a time: each one sees the previous ones' blocks in the cache.
    engine = make_engine("apc", max_num_seqs=1, hash_algo=WEAK, **overrides)
    records = by_id(run_batch(engine, colliding_requests()))
    engine.cache.check_integrity()
    return records


def outputs(records) -> dict[str, tuple[int, ...]]:
    return {rid: r.output_ids for rid, r in records.items()}


def test_verification_is_off_by_default_and_sha256_is_the_default_hash():
    assert EngineConfig().verify_tokens_on_hit is False
    assert EngineConfig().hash_algo == "sha256"


def test_collision_without_verification_reuses_the_wrong_kv():
    reference = outputs(run(prefix_caching=False))
    records = run(verify_tokens_on_hit=False)
    reusable = (PROMPT_LEN - 1) // BLOCK * BLOCK
    assert records["b"].cached_tokens == reusable  # B "hit" A's blocks: the collision
    assert records["b"].output_ids != reference["b"]  # and decoded from the wrong KV
    assert records["a"].output_ids == reference["a"]


def test_verification_refuses_colliding_blocks_and_keeps_true_hits():
    reference = outputs(run(prefix_caching=False))
    records = run(verify_tokens_on_hit=True)
    assert records["b"].cached_tokens == 0
    assert records["a-again"].cached_tokens == (PROMPT_LEN - 1) // BLOCK * BLOCK
    assert outputs(records) == reference


SALT_BLIND = "test_salt_ignored"


def _salt_ignored(obj) -> bytes:
    """Hashes (parent, tokens) only: two tenants' identical prompts collide block by block."""
    if isinstance(obj, tuple) and len(obj) == 3:
        obj = obj[:2]
    return hashlib.sha256(pickle.dumps(obj)).digest()


@pytest.fixture(autouse=True, scope="module")
def _test_digests():
    """The two weak digests exist only while this module runs (the registry is process-wide)."""
    with extra_hash_fn(WEAK, _tokens_ignored), extra_hash_fn(SALT_BLIND, _salt_ignored):
        yield


def test_verification_also_refuses_a_cross_tenant_collision():
    # Equal tokens, different tenants: only the extra keys (the salt) tell the blocks apart, and
    # the weak digest drops them. Verification compares the cached block's provenance (parent
    # block, extra keys, tokens), so tenant t2 must not reuse tenant t1's KV.
    rng = np.random.default_rng(11)
    prompt = tuple(rng.integers(1, 1024, PROMPT_LEN).tolist())
    reqs = [
        GenerationRequest("t1", prompt, OUTPUT_LEN, salt="t1"),
        GenerationRequest("t2", prompt, OUTPUT_LEN, salt="t2"),
    ]
    leaky = by_id(run_batch(make_engine("apc", max_num_seqs=1, hash_algo=SALT_BLIND), reqs))
    assert leaky["t2"].cached_tokens == 32  # the collision leaks across tenants without checking
    safe = by_id(
        run_batch(
            make_engine("apc", max_num_seqs=1, hash_algo=SALT_BLIND, verify_tokens_on_hit=True),
            reqs,
        )
    )
    assert safe["t2"].cached_tokens == 0
