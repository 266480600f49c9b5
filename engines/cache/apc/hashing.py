"""Chained block hashes for APC (docs/apc.md §1): hash functions, NONE_HASH, extra keys.

    h_i = H((h_{i-1}, tuple(tokens[i*B:(i+1)*B]), extra_keys_i)),   h_{-1} = NONE_HASH

Map keys are `h + group_id.to_bytes(4, "big")` (BlockHashWithGroupId); this project uses group 0.
The pickle-based digests hash runs of blocks in C (_pickle_chain.c, built by setup.py) or, where
that is not built, in an inlined Python loop: the same bytes hashed, the same keys.
Extra keys: the LoRA name on every block, the cache salt only on block 0 (v0.12-v0.28 forms).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import pickle
from array import array
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, NamedTuple

import cbor2
import xxhash

from engines.registry import Registry

try:  # built by setup.py where a C compiler and OpenSSL's headers are; same keys, ~5x faster
    from engines.cache.apc import _pickle_chain  # type: ignore[attr-defined]

    _native: ModuleType | None = _pickle_chain
except ImportError:
    _native = None

logger = logging.getLogger(__name__)

HashFn = Callable[[Any], bytes]
GROUP_ID_BYTES = 4
GROUP0 = (0).to_bytes(GROUP_ID_BYTES, "big")
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"  # v0.29+ fixed seed for the sha256 family
_PICKLE = pickle.HIGHEST_PROTOCOL


class HashAlgo(NamedTuple):
    """A digest function and whether its unseeded NONE_HASH is reproducible (§1.5)."""

    fn: HashFn
    fixed_default_seed: bool


def _sha256(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=_PICKLE)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def _xxhash(obj: Any) -> bytes:
    return xxhash.xxh3_128_digest(pickle.dumps(obj, protocol=_PICKLE))


def _xxhash_cbor(obj: Any) -> bytes:
    return xxhash.xxh3_128_digest(cbor2.dumps(obj, canonical=True))


def _builtin(obj: Any) -> bytes:
    # Project convention (not upstream): 8 signed big-endian bytes, so every key is bytes.
    return hash(obj).to_bytes(8, "big", signed=True)


# A chain hashes the whole blocks token_ids[start:stop] from `parent`, appends one map key per
# block to `keys` and returns the last raw hash: (parent, token_ids, start, stop, extra, keys).
ExtraKeys = tuple[Any, ...]
ChainFn = Callable[[bytes, Sequence[int], int, int, "ExtraKeys | None", list[bytes]], bytes]


def _blocks(
    token_ids: Sequence[int], start: int, stop: int, block_size: int
) -> Iterator[tuple[int, ...]]:
    """Token tuples of the blocks in [start, stop), cut by zip over one iterator (no slice per
    block); zip drops a trailing partial block, so only a range short of the end needs a slice."""
    ids = token_ids[start:stop] if start or len(token_ids) - stop >= block_size else token_ids
    if isinstance(ids, array):  # a compact prompt: one C pass to ints beats one per zip step
        ids = ids.tolist()
    return zip(*[iter(ids)] * block_size)


def _sha256_chain(block_size: int) -> ChainFn:
    def chain(
        parent: bytes,
        token_ids: Sequence[int],
        start: int,
        stop: int,
        extra: ExtraKeys | None,
        keys: list[bytes],
    ) -> bytes:
        # _sha256 inlined: the same bytes hashed, without a Python call per block.
        sha, dumps, append = hashlib.sha256, pickle.dumps, keys.append
        for block in _blocks(token_ids, start, stop, block_size):
            parent = sha(dumps((parent, block, extra), _PICKLE)).digest()
            append(parent + GROUP0)
        return parent

    return chain


def _xxhash_chain(block_size: int) -> ChainFn:
    def chain(
        parent: bytes,
        token_ids: Sequence[int],
        start: int,
        stop: int,
        extra: ExtraKeys | None,
        keys: list[bytes],
    ) -> bytes:
        digest, dumps, append = xxhash.xxh3_128_digest, pickle.dumps, keys.append
        for block in _blocks(token_ids, start, stop, block_size):
            parent = digest(dumps((parent, block, extra), _PICKLE))
            append(parent + GROUP0)
        return parent

    return chain


def _generic_chain(fn: HashFn, block_size: int) -> ChainFn:
    def chain(
        parent: bytes,
        token_ids: Sequence[int],
        start: int,
        stop: int,
        extra: ExtraKeys | None,
        keys: list[bytes],
    ) -> bytes:
        for block in _blocks(token_ids, start, stop, block_size):
            parent = fn((parent, block, extra))
            keys.append(parent + GROUP0)
        return parent

    return chain


# Pickle-based digests: the inlined Python chain, and what the C chain hashes its pickle bytes
# with (None: OpenSSL's SHA-256 inside the extension, the library hashlib.sha256 runs).
class PickleDigest(NamedTuple):
    python_chain: Callable[[int], ChainFn]
    native_digest: Callable[[bytes], bytes] | None


_PICKLE_DIGESTS: dict[HashFn, PickleDigest] = {
    _sha256: PickleDigest(_sha256_chain, None),
    _xxhash: PickleDigest(_xxhash_chain, xxhash.xxh3_128_digest),
}

# The pickle of (parent, block, extra) up to the extra keys, for a sample parent and block: what
# extra_fragment strips to find the extra keys' own bytes (layout: engines/cache/apc/_pickle_chain.c).
_SAMPLE_PARENT = bytes(range(32))
_SAMPLE_BLOCK = (0, 1, 2, 3)
_SAMPLE_HEAD = b"C\x20" + _SAMPLE_PARENT + b"\x94(K\x00K\x01K\x02K\x03t\x94"
_PICKLE_TAIL = b"\x87\x94."  # TUPLE3, MEMOIZE, STOP
_FRAME_HEADER_LEN = 11  # PROTO 5, FRAME, 8-byte frame length


@functools.lru_cache(maxsize=4096)
def extra_fragment(extra: ExtraKeys | None) -> bytes | None:
    """The bytes `extra` adds to the pickle of (parent, block, extra), cut from a real
    pickle.dumps; None when the pickle does not have the single-frame layout the C chain writes."""
    data = pickle.dumps((_SAMPLE_PARENT, _SAMPLE_BLOCK, extra), _PICKLE)
    body = data[_FRAME_HEADER_LEN:]
    frame_len = int.from_bytes(data[3:_FRAME_HEADER_LEN], "little")
    if (
        data[:3] != b"\x80\x05\x95"
        or frame_len != len(body)
        or not body.startswith(_SAMPLE_HEAD)
        or not body.endswith(_PICKLE_TAIL)
    ):
        return None
    return body[len(_SAMPLE_HEAD) : -len(_PICKLE_TAIL)]


def _native_chain(
    digest: Callable[[bytes], bytes] | None, block_size: int, python: ChainFn
) -> ChainFn:
    assert _native is not None  # chain_for asks for it only when built
    native = _native.chain

    def chain(
        parent: bytes,
        token_ids: Sequence[int],
        start: int,
        stop: int,
        extra: ExtraKeys | None,
        keys: list[bytes],
    ) -> bytes:
        fragment = extra_fragment(extra)
        if fragment is not None:
            try:
                last: bytes = native(
                    digest, parent, token_ids, start, stop, block_size, fragment, GROUP0, keys
                )
                return last
            except (TypeError, OverflowError):
                pass  # a token the C chain does not write (not an int32): nothing was appended
        return python(parent, token_ids, start, stop, extra, keys)

    return chain


def native_chain_available() -> bool:
    """Whether setup.py built the C chain (engines/cache/apc/_pickle_chain.c) for this Python."""
    return _native is not None


def chain_for(fn: HashFn, block_size: int, native: bool = True) -> ChainFn:
    """The block-run hasher of `fn` at `block_size`: for the pickle-based digests the C chain when
    built (and `native`), else an inlined Python loop; for any other digest a loop calling `fn`
    on each (parent, tokens, extra) tuple. All give the keys of calling `fn` per block."""
    spec = _PICKLE_DIGESTS.get(fn)
    if spec is None:
        return _generic_chain(fn, block_size)
    python = spec.python_chain(block_size)
    if native and _native is not None and 4 <= block_size <= _native.MAX_BLOCK_SIZE:
        return _native_chain(spec.native_digest, block_size, python)
    return python


HASH_ALGOS: Registry[HashAlgo] = Registry("hash_algo")
HASH_ALGOS.add("sha256", HashAlgo(_sha256, True))
HASH_ALGOS.add("sha256_cbor", HashAlgo(_sha256_cbor, True))
HASH_ALGOS.add("xxhash", HashAlgo(_xxhash, False))
HASH_ALGOS.add("xxhash_cbor", HashAlgo(_xxhash_cbor, False))
HASH_ALGOS.add("builtin", HashAlgo(_builtin, False))


@contextlib.contextmanager
def extra_hash_fn(name: str, fn: HashFn) -> Iterator[None]:
    """Test-only hook: an extra (e.g. deliberately weak) digest under `name` while the block runs.
    Scoped because HASH_ALGOS is global: a digest left behind would join every later sweep over
    the registry in that process (claim 21 iterates it)."""
    HASH_ALGOS.add(name, HashAlgo(fn, True))
    try:
        yield
    finally:
        HASH_ALGOS.remove(name)


def get_hash_fn_by_name(name: str) -> HashFn:
    """The digest function called `name`; ValueError (listing valid names) if unknown."""
    return HASH_ALGOS.get(name).fn


def init_none_hash(algo: str, seed: str | None = None) -> bytes:
    """NONE_HASH per the project rule of §1.5: H(seed) if given, else H("vllm-none-hash") for the
    sha256 family and H(random hex) with a warning for the non-cryptographic digests."""
    spec = HASH_ALGOS.get(algo)
    if seed is None:
        if spec.fixed_default_seed:
            seed = DEFAULT_NONE_HASH_SEED
        else:
            logger.warning(
                "hash_algo=%s without none_hash_seed: NONE_HASH is random per process, so block "
                "hashes are not reproducible across processes",
                algo,
            )
            seed = os.urandom(32).hex()
    return spec.fn(seed)


def hash_block_tokens(
    hash_fn: HashFn,
    parent_block_hash: bytes | None,
    curr_block_token_ids: Sequence[int],
    extra_keys: ExtraKeys | None = None,
    *,
    none_hash: bytes,
) -> bytes:
    """One block's hash; a falsy parent is replaced by `none_hash` (§1.1)."""
    parent = parent_block_hash or none_hash
    return hash_fn((parent, tuple(curr_block_token_ids), extra_keys))


def block_extra_keys(block_index: int, lora_name: str | None, salt: str | None) -> ExtraKeys | None:
    """Extra keys of one block: LoRA name on every block, then the salt on block 0 only (§1.4)."""
    keys: ExtraKeys = ()
    if lora_name:
        keys += (lora_name,)
    if block_index == 0 and salt:
        keys += (salt,)
    return keys or None


def with_group_id(block_hash: bytes, group_id: int = 0) -> bytes:
    return block_hash + group_id.to_bytes(GROUP_ID_BYTES, "big")


def get_block_hash(key: bytes) -> bytes:
    return key[:-GROUP_ID_BYTES]


def get_group_id(key: bytes) -> int:
    return int.from_bytes(key[-GROUP_ID_BYTES:], "big")


class RequestBlockHashes:
    """Per-request memo of the map keys of its full blocks, extended incrementally (§1.3)."""

    __slots__ = ("keys", "parent", "extra_first", "extra_rest", "owner")

    def __init__(self, owner: object, lora_name: str | None, salt: str | None) -> None:
        self.keys: list[bytes] = []  # hash + group id, one per full block
        self.parent: bytes | None = None  # raw hash of the last full block
        self.extra_first = block_extra_keys(0, lora_name, salt)
        self.extra_rest = block_extra_keys(1, lora_name, salt)
        self.owner = owner  # the Sequence these hashes belong to (guards seq_id reuse)

    @property
    def block_hashes(self) -> list[bytes]:
        return [get_block_hash(k) for k in self.keys]


class RequestHasher:
    """Hashes only new full blocks of a token list, chaining from the memo's last hash, with the
    function's chain (`chain_for`), which gives the same keys as calling it per block."""

    __slots__ = ("hash_fn", "none_hash", "block_size", "chain")

    def __init__(self, hash_fn: HashFn, none_hash: bytes, block_size: int) -> None:
        self.hash_fn = hash_fn
        self.none_hash = none_hash
        self.block_size = block_size
        self.chain = chain_for(hash_fn, block_size)

    def extend(self, memo: RequestBlockHashes, token_ids: Sequence[int]) -> list[bytes]:
        """Append keys for every new full block; afterwards len(keys) == len(token_ids) // B."""
        keys = memo.keys
        bs = self.block_size
        start = len(keys) * bs
        stop = len(token_ids) - len(token_ids) % bs
        if start >= stop:
            return keys
        parent = memo.parent
        if parent is None:  # block 0 carries the salt (§1.4)
            parent = self.chain(self.none_hash, token_ids, 0, bs, memo.extra_first, keys)
            start = bs
        memo.parent = self.chain(parent, token_ids, start, stop, memo.extra_rest, keys)
        return keys
