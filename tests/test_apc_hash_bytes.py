"""The run hashing of pickled_blocks.py feeds the digest exactly pickle.dumps's bytes, block by
block: random tokens across every int opcode width, block sizes, parents and extra-key shapes, and
the layouts it hands to the per-block loop; the hashers' keys equal per-block hash_block_tokens."""

from __future__ import annotations

import hashlib
import pickle
import random

import pytest

from engines.cache.apc.hashing import (
    RequestBlockHashes,
    RequestHasher,
    get_hash_fn_by_name,
    hash_block_tokens,
    init_none_hash,
)
from engines.cache.apc.pickled_blocks import PROTOCOL, RUN_TOKENS, hash_blocks

SUFFIX = b"\x00\x00\x00\x00"
EDGES = [0, 1, 255, 256, 65535, 65536, 2**31 - 1, -1, -(2**31), -256]


class Recorder:
    """A digest constructor that keeps every input it is given (sha256 of it as the digest)."""

    def __init__(self) -> None:
        self.inputs: list[bytes] = []

    def __call__(self, data: bytes = b""):
        if data:
            self.inputs.append(bytes(data))
        return hashlib.sha256(data)


def _tokens(rng: random.Random, n: int) -> list[int]:
    pick = [
        lambda: rng.randrange(256),
        lambda: rng.randrange(256, 65536),
        lambda: rng.randrange(65536, 2**31),
        lambda: rng.randrange(-(2**31), 0),
        lambda: rng.choice(EDGES),
    ]
    return [rng.choice(pick)() for _ in range(n)]


EXTRAS = [None, ("lora-a",), ("t1",), ("lora-a", "t1"), ("a", "a"), ("é" * 300,), ("x" * 256, "y")]


def _check_bytes(tokens, lead, num_blocks, block_size, extra, parent):
    record, keys = Recorder(), []
    stop = lead + num_blocks * block_size
    last = hash_blocks(record, parent, tokens, (lead, stop, block_size), extra, keys.append, SUFFIX)
    assert len(record.inputs) == len(keys) == num_blocks
    for i, data in enumerate(record.inputs):
        block = tuple(tokens[lead + i * block_size : lead + (i + 1) * block_size])
        assert data == pickle.dumps((parent, block, extra), PROTOCOL)
        parent = hashlib.sha256(data).digest()
        assert keys[i] == parent + SUFFIX
    assert last == parent


@pytest.mark.parametrize("block_size", [1, 3, 4, 5, 16, 64])
@pytest.mark.parametrize("extra", EXTRAS, ids=range(len(EXTRAS)))
def test_run_hashes_digest_pickle_dumps_bytes(block_size, extra):
    rng = random.Random(block_size * 31 + EXTRAS.index(extra))
    for _ in range(12):
        num_blocks = rng.randrange(1, 24)
        lead = rng.randrange(3) * block_size  # runs start anywhere on a block boundary
        tokens = _tokens(rng, lead + num_blocks * block_size + rng.randrange(block_size))
        parent = rng.randbytes(32)  # a sha256 digest, as every later parent
        _check_bytes(tokens, lead, num_blocks, block_size, extra, parent)


@pytest.mark.parametrize(
    "tokens,block_size,parent_len",
    [
        ([1] * 63 + [2**31], 16, 32),  # a token beyond int32 pickles as LONG1
        ([5] * 60 + [2**70, -(2**40), 3, 4], 16, 32),  # longer LONG1 opcodes
        ([0x289474] * 64, 16, 32),  # token bytes 74 94 28 contain the block seam
        ([1] * 64, 16, 16),  # a first parent shorter than the digest (the loop takes it)
        ([300] * (RUN_TOKENS * 2 + 64), 16, 32),  # several runs of RUN_TOKENS
        ([70000] * (16 * 4096), 4096, 32),  # 4 blocks of 20 KiB each: more than one frame
    ],
    ids=["long1", "long1-wide", "seam", "short-parent", "runs", "frames"],
)
def test_layouts_off_the_fast_path_hash_the_same_bytes(tokens, block_size, parent_len):
    num_blocks = len(tokens) // block_size
    _check_bytes(tokens, 0, num_blocks, block_size, ("lora-a",), bytes(range(parent_len)))


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
@pytest.mark.parametrize("lora,salt", [(None, None), ("lora-a", "t1"), ("a", "a")])
def test_request_hasher_keys_equal_hash_block_tokens(algo, lora, salt):
    """Whole prompts, then decode growth a few tokens at a time, against the per-block function
    (vLLM's hash_block_tokens with the same extra keys per block)."""
    rng = random.Random(7)
    fn, none_hash = get_hash_fn_by_name(algo), init_none_hash(algo, "0")
    hasher = RequestHasher(fn, none_hash, 16)
    tokens = _tokens(rng, 16 * 40 + 5)
    memo = RequestBlockHashes(None, lora, salt)
    hasher.extend(memo, tokens)
    for _ in range(30):
        tokens += _tokens(rng, rng.randrange(1, 40))
        hasher.extend(memo, tokens)
    parent, want = None, []
    for i in range(len(tokens) // 16):
        extra = memo.extra_first if i == 0 else memo.extra_rest
        parent = hash_block_tokens(
            fn, parent, tokens[i * 16 : (i + 1) * 16], extra, none_hash=none_hash
        )
        want.append(parent)
    assert memo.block_hashes == want
