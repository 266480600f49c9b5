"""APC block hashing (docs/apc.md §1): formula, NONE_HASH seeding, extra keys, hash functions."""

from __future__ import annotations

import hashlib
import pickle

import cbor2
import pytest
import xxhash

from engines.cache.apc.hashing import (
    GROUP0,
    HASH_ALGOS,
    RequestBlockHashes,
    RequestHasher,
    block_extra_keys,
    chain_for,
    get_block_hash,
    get_group_id,
    get_hash_fn_by_name,
    hash_block_tokens,
    init_none_hash,
    with_group_id,
)
from engines.registry import UnknownNameError

TOKENS = list(range(1000, 1040))


def _pk(obj) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def test_hash_fns_match_their_definitions():
    obj = (b"p" * 32, (1, 2, 3), None)
    assert get_hash_fn_by_name("sha256")(obj) == hashlib.sha256(_pk(obj)).digest()
    assert (
        get_hash_fn_by_name("sha256_cbor")(obj)
        == hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()
    )
    assert get_hash_fn_by_name("xxhash")(obj) == xxhash.xxh3_128_digest(_pk(obj))
    assert get_hash_fn_by_name("xxhash_cbor")(obj) == xxhash.xxh3_128_digest(
        cbor2.dumps(obj, canonical=True)
    )
    assert get_hash_fn_by_name("builtin")(obj) == hash(obj).to_bytes(8, "big", signed=True)


@pytest.mark.parametrize(
    "name,size",
    [("sha256", 32), ("sha256_cbor", 32), ("xxhash", 16), ("xxhash_cbor", 16), ("builtin", 8)],
)
def test_digest_sizes(name, size):
    assert len(get_hash_fn_by_name(name)(("x",))) == size


def test_unknown_hash_fn_is_a_value_error_listing_valid_names():
    with pytest.raises(ValueError, match="valid: builtin, sha256"):
        get_hash_fn_by_name("md5")
    assert issubclass(UnknownNameError, ValueError)


def test_none_hash_seeding_rule():
    sha = get_hash_fn_by_name("sha256")
    assert init_none_hash("sha256", "0") == hashlib.sha256(_pk("0")).digest()
    assert init_none_hash("sha256") == sha("vllm-none-hash")
    assert init_none_hash("sha256_cbor") == get_hash_fn_by_name("sha256_cbor")("vllm-none-hash")
    assert init_none_hash("xxhash", "s") == xxhash.xxh3_128_digest(_pk("s"))


def test_xxhash_without_seed_is_random_and_warns(caplog):
    with caplog.at_level("WARNING"):
        a = init_none_hash("xxhash")
    assert "not reproducible" in caplog.text
    assert a != init_none_hash("xxhash")


def test_hash_formula_invariant_19_shape():
    f = get_hash_fn_by_name("sha256")
    none_hash = init_none_hash("sha256", "0")
    h0 = hash_block_tokens(f, None, TOKENS[0:16], none_hash=none_hash)
    assert h0 == hashlib.sha256(_pk((none_hash, tuple(TOKENS[0:16]), None))).digest()
    assert h0 == hash_block_tokens(f, none_hash, TOKENS[0:16], none_hash=none_hash)
    h1 = hash_block_tokens(f, h0, TOKENS[16:32], none_hash=none_hash)
    assert h1 == hashlib.sha256(_pk((h0, tuple(TOKENS[16:32]), None))).digest()
    key = with_group_id(h1)
    assert len(key) == 36 and key[-4:] == b"\x00\x00\x00\x00" and key == h1 + GROUP0
    assert get_block_hash(key) == h1 and get_group_id(key) == 0
    assert get_group_id(with_group_id(h1, 3)) == 3


def test_extra_keys_lora_every_block_salt_block0_only():
    assert block_extra_keys(0, None, None) is None
    assert block_extra_keys(0, None, "t1") == ("t1",)
    assert block_extra_keys(1, None, "t1") is None
    assert block_extra_keys(0, "ad", "t1") == ("ad", "t1")
    assert block_extra_keys(5, "ad", "t1") == ("ad",)
    assert block_extra_keys(0, None, "") is None  # an empty salt is no salt


def _hasher(algo="sha256", bs=16):
    return RequestHasher(get_hash_fn_by_name(algo), init_none_hash(algo, "0"), bs)


def test_request_hasher_chains_and_matches_hash_block_tokens():
    hasher = _hasher()
    memo = RequestBlockHashes(None, None, "salt")
    keys = hasher.extend(memo, TOKENS)
    assert len(keys) == 2  # only full blocks: 40 // 16
    f, nh = hasher.hash_fn, hasher.none_hash
    h0 = hash_block_tokens(f, None, TOKENS[:16], ("salt",), none_hash=nh)
    h1 = hash_block_tokens(f, h0, TOKENS[16:32], None, none_hash=nh)
    assert memo.block_hashes == [h0, h1]


def test_request_hasher_is_incremental():
    hasher = _hasher(bs=4)
    memo = RequestBlockHashes(None, "lora-a", None)
    tokens = TOKENS[:6]
    assert len(hasher.extend(memo, tokens)) == 1
    first = list(memo.keys)
    tokens = TOKENS[:8]  # generated tokens complete block 1
    assert len(hasher.extend(memo, tokens)) == 2
    assert memo.keys[:1] == first
    fresh = RequestBlockHashes(None, "lora-a", None)
    assert hasher.extend(fresh, TOKENS[:8]) == memo.keys  # same as hashing all at once


def test_salt_changes_every_later_hash_and_lora_too():
    hasher = _hasher()
    plain = hasher.extend(RequestBlockHashes(None, None, None), TOKENS)
    salted = hasher.extend(RequestBlockHashes(None, None, "t1"), TOKENS)
    lora = hasher.extend(RequestBlockHashes(None, "a", None), TOKENS)
    assert all(p != s for p, s in zip(plain, salted))
    assert all(p != lo for p, lo in zip(plain, lora))


@pytest.mark.parametrize("algo", ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "builtin"])
def test_every_algo_is_registered_and_deterministic_given_a_seed(algo):
    assert algo in HASH_ALGOS
    a = _hasher(algo).extend(RequestBlockHashes(None, None, None), TOKENS)
    b = _hasher(algo).extend(RequestBlockHashes(None, None, None), TOKENS)
    assert a == b and len(set(a)) == 2


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
@pytest.mark.parametrize("lora,salt", [(None, None), ("lora-a", None), (None, "t1"), ("a", "a")])
def test_inlined_chains_hash_the_same_bytes_as_the_function(algo, lora, salt):
    """The inlined pickle chains give the keys of calling the digest per block, for every extra-key
    shape and token range (1-, 2- and 4-byte pickle ints, negatives included)."""
    fn = get_hash_fn_by_name(algo)
    tokens = [0, 255, 256, 65535, 65536, 2**31 - 1, -1, 7] * 8
    for bs in (1, 3, 4, 16):
        fast = RequestHasher(fn, init_none_hash(algo, "0"), bs)
        slow = RequestHasher(fn, init_none_hash(algo, "0"), bs)
        slow.chain = chain_for(lambda obj: fn(obj))  # not registered: the per-block call
        assert fast.chain is not slow.chain
        got = fast.extend(RequestBlockHashes(None, lora, salt), tokens)
        want = slow.extend(RequestBlockHashes(None, lora, salt), tokens)
        assert got == want and len(got) == len(tokens) // bs
