"""Chained block hashes for APC (docs/apc.md §1): hash functions, NONE_HASH, extra keys.

    h_i = H((h_{i-1}, tuple(tokens[i*B:(i+1)*B]), extra_keys_i)),   h_{-1} = NONE_HASH

Map keys are `h + group_id.to_bytes(4, "big")` (BlockHashWithGroupId); this project uses group 0.
The pickle-based digests hash runs of blocks in an inlined loop (same bytes, same hashes).
Extra keys: the LoRA name on every block, the cache salt only on block 0 (v0.12-v0.28 forms).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import cbor2
import xxhash

from engines.registry import Registry

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


# A chain hashes a run of blocks: (parent, token tuples, extra keys, keys.append) -> last hash.
ChainFn = Callable[[bytes, Iterable[tuple], "tuple | None", Callable[[bytes], None]], bytes]


def _sha256_chain(parent: bytes, blocks: Iterable[tuple], extra: tuple | None, append) -> bytes:
    # _sha256 inlined: the same bytes hashed, without a Python call per block.
    sha, dumps = hashlib.sha256, pickle.dumps
    for block in blocks:
        parent = sha(dumps((parent, block, extra), _PICKLE)).digest()
        append(parent + GROUP0)
    return parent


def _xxhash_chain(parent: bytes, blocks: Iterable[tuple], extra: tuple | None, append) -> bytes:
    digest, dumps = xxhash.xxh3_128_digest, pickle.dumps
    for block in blocks:
        parent = digest(dumps((parent, block, extra), _PICKLE))
        append(parent + GROUP0)
    return parent


_CHAINS: dict[HashFn, ChainFn] = {_sha256: _sha256_chain, _xxhash: _xxhash_chain}


def chain_for(fn: HashFn) -> ChainFn:
    """The block-run hasher of `fn`: an inlined loop for the pickle-based digests, else a loop
    that calls `fn` on each (parent, tokens, extra) tuple."""
    chain = _CHAINS.get(fn)
    if chain is not None:
        return chain

    def generic(parent: bytes, blocks: Iterable[tuple], extra: tuple | None, append) -> bytes:
        for block in blocks:
            parent = fn((parent, block, extra))
            append(parent + GROUP0)
        return parent

    return generic


HASH_ALGOS: Registry[HashAlgo] = Registry("hash_algo")
HASH_ALGOS.add("sha256", HashAlgo(_sha256, True))
HASH_ALGOS.add("sha256_cbor", HashAlgo(_sha256_cbor, True))
HASH_ALGOS.add("xxhash", HashAlgo(_xxhash, False))
HASH_ALGOS.add("xxhash_cbor", HashAlgo(_xxhash_cbor, False))
HASH_ALGOS.add("builtin", HashAlgo(_builtin, False))


def register_hash_fn(name: str, fn: HashFn) -> None:
    """Test-only hook: register an extra (e.g. deliberately weak) digest under `name`."""
    HASH_ALGOS.add(name, HashAlgo(fn, True))


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
    extra_keys: tuple | None = None,
    *,
    none_hash: bytes,
) -> bytes:
    """One block's hash; a falsy parent is replaced by `none_hash` (§1.1)."""
    parent = parent_block_hash or none_hash
    return hash_fn((parent, tuple(curr_block_token_ids), extra_keys))


def block_extra_keys(block_index: int, lora_name: str | None, salt: str | None) -> tuple | None:
    """Extra keys of one block: LoRA name on every block, then the salt on block 0 only (§1.4)."""
    keys: tuple = ()
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
    """Hashes only new full blocks of a token list, chaining from the memo's last hash.

    Blocks are cut by zip over one iterator (a tuple per block, no slice per block) and hashed
    by the function's chain (`chain_for`), which gives the same keys as calling it per block."""

    __slots__ = ("hash_fn", "none_hash", "block_size", "chain")

    def __init__(self, hash_fn: HashFn, none_hash: bytes, block_size: int) -> None:
        self.hash_fn = hash_fn
        self.none_hash = none_hash
        self.block_size = block_size
        self.chain = chain_for(hash_fn)

    def extend(self, memo: RequestBlockHashes, token_ids: list[int]) -> list[bytes]:
        """Append keys for every new full block; afterwards len(keys) == len(token_ids) // B."""
        keys = memo.keys
        bs = self.block_size
        start = len(keys) * bs
        stop = len(token_ids) - len(token_ids) % bs
        if start >= stop:
            return keys
        # zip drops the trailing partial block; only a continuation needs a slice
        blocks = zip(*[iter(token_ids[start:stop] if start else token_ids)] * bs)
        parent = memo.parent
        if parent is None:
            parent = self.chain(self.none_hash, (next(blocks),), memo.extra_first, keys.append)
        memo.parent = self.chain(parent, blocks, memo.extra_rest, keys.append)
        return keys
