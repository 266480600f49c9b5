"""APC block hashing (docs/apc.md §1): formula, NONE_HASH seeding, extra keys, hash functions."""

from __future__ import annotations

import hashlib
import pickle
import shutil
import sysconfig
from array import array
from pathlib import Path

import cbor2
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.cache.apc.hashing import (
    GROUP0,
    HASH_ALGOS,
    RequestBlockHashes,
    RequestHasher,
    block_extra_keys,
    chain_for,
    extra_fragment,
    extra_hash_fn,
    get_block_hash,
    get_group_id,
    get_hash_fn_by_name,
    hash_block_tokens,
    init_none_hash,
    native_chain_available,
    with_group_id,
)
from engines.registry import UnknownNameError

try:
    from engines.cache.apc import _pickle_chain  # type: ignore[attr-defined]
except ImportError:
    _pickle_chain = None
needs_native = pytest.mark.skipif(_pickle_chain is None, reason="the C chain is not built here")

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


# Every pickle int width (BININT1, BININT2, BININT) and both int32 ends.
EDGE_TOKENS = [0, 255, 256, 65535, 65536, 2**31 - 1, -1, -(2**31), 7]


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("lora,salt", [(None, None), ("lora-a", None), (None, "t1"), ("a", "a")])
def test_chains_hash_the_same_bytes_as_the_function(algo, native, lora, salt):
    """The C and the inlined Python pickle chains give the keys of calling the digest per block,
    for every extra-key shape, token width and block size, from lists and int32 arrays."""
    fn = get_hash_fn_by_name(algo)
    tokens = EDGE_TOKENS * 8 + [3]
    for bs in (1, 3, 4, 16):
        fast = RequestHasher(fn, init_none_hash(algo, "0"), bs)
        fast.chain = chain_for(fn, bs, native=native)
        slow = RequestHasher(fn, init_none_hash(algo, "0"), bs)
        slow.chain = chain_for(lambda obj: fn(obj), bs)  # not registered: the per-block call
        want = slow.extend(RequestBlockHashes(None, lora, salt), tokens)
        assert len(want) == len(tokens) // bs
        for ids in (tokens, array("i", tokens)):
            assert fast.extend(RequestBlockHashes(None, lora, salt), ids) == want


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=4, max_size=200),
    bs=st.integers(4, 40),
    extra=st.sampled_from([None, ("lora",), ("salt-\u00e9",), ("a", "a"), ("x" * 300,)]),
)
def test_native_chain_writes_pickle_dumps_bytes(tokens, bs, extra):
    """Block by block, the C chain's SHA-256 keys are sha256(pickle.dumps((parent, block, extra)))."""
    fn = get_hash_fn_by_name("sha256")
    stop = len(tokens) - len(tokens) % bs
    keys: list[bytes] = []
    last = chain_for(fn, bs)(b"p" * 32, tokens, 0, stop, extra, keys)
    parent = b"p" * 32
    for i, key in enumerate(keys):
        parent = hashlib.sha256(_pk((parent, tuple(tokens[i * bs : (i + 1) * bs]), extra))).digest()
        assert key == parent + GROUP0
    assert len(keys) == stop // bs and last == parent


@needs_native
@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1, True, 3.0])
def test_tokens_the_c_chain_does_not_write_fall_back_to_python(bad):
    """A token outside int32 (or not an int) raises in C before any key is appended, and the
    chain hashes that run in Python: the keys are still the function's."""
    fn = get_hash_fn_by_name("sha256")
    tokens = [1, 2, 3, bad, 5, 6, 7, 8]
    keys: list[bytes] = []
    chain_for(fn, 4)(b"p" * 32, tokens, 0, 8, None, keys)
    want: list[bytes] = []
    chain_for(fn, 4, native=False)(b"p" * 32, tokens, 0, 8, None, want)
    assert keys == want and len(keys) == 2
    with pytest.raises((TypeError, OverflowError)):
        _pickle_chain.chain(None, b"p" * 32, tokens, 0, 8, 4, b"N", GROUP0, keys)
    assert keys == want  # nothing appended by the failed call


def test_extra_fragment_is_what_pickle_writes_for_the_extra_keys():
    assert extra_fragment(None) == b"N"
    frag = extra_fragment(("lora-a", "t1"))
    full = _pk((b"q" * 32, (1, 2, 3, 4, 5), ("lora-a", "t1")))
    assert frag is not None and full.endswith(frag + b"\x87\x94.")
    # A pickle that no longer fits one frame is not the layout the C chain writes.
    assert extra_fragment(("x" * 70_000,)) is None


def test_the_c_chain_is_built_where_it_can_be():
    """setup.py builds the extension optionally; where a C compiler and OpenSSL's headers exist
    (this project's CI machine), a missing build is an install step gone wrong, not a fallback."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = [Path(p) / "openssl" / "evp.h" for p in ("/usr/include", "/usr/local/include")]
    if shutil.which(cc) is None or not any(h.exists() for h in headers):
        pytest.skip("no C compiler or OpenSSL headers here: the Python chain is the one in use")
    assert native_chain_available(), "engines/cache/apc/_pickle_chain.c was not built"


def test_a_test_digest_leaves_the_registry_with_its_block():
    """HASH_ALGOS is process-wide: a test's extra digest must not join later sweeps over it (claim 21
    compared a deliberately weak digest's hits once, in a pytest worker that had run such a test)."""
    before = HASH_ALGOS.names()
    with extra_hash_fn("test_scoped", lambda obj: b"\0" * 32):
        assert "test_scoped" in HASH_ALGOS
    assert HASH_ALGOS.names() == before
