"""vllm-router's ring hash, so the consistent_hash twin lands a key where the real router does.

vllm-router 0.1.17 (src/policies/consistent_hash.rs) places 160 points per worker at
hash(f"{worker_url}:{i}") and sends a request to the first point at or after hash(key), wrapping
to the smallest. Its hash is mcrouter's (lib/fbi/hash.c): furc_hash of the key into 2**23 - 1
buckets, whose bits come from a chain of MurmurHash64A values, then MurmurHash64A of that bucket
number's four little-endian bytes. The key is "header:x-session-id:<id>" for a request with an
X-Session-ID header (src/policies/hash_key.rs). Written here from that description.
"""

from __future__ import annotations

import struct

_M = 0xC6A4A7935BD1E995
_MASK = (1 << 64) - 1
_SEED = 4193360111
_SHIFT = 23  # bits of the bucket drawn per round
_MODULUS = (1 << 23) - 1
_TRIES = 32


def murmur64a(data: bytes, seed: int = _SEED) -> int:
    """MurmurHash64A (Austin Appleby's 64-bit variant), as mcrouter uses it."""
    h = (seed ^ (len(data) * _M)) & _MASK
    whole = len(data) - len(data) % 8
    for (k,) in struct.iter_unpack("<Q", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 47
        k = (k * _M) & _MASK
        h = ((h ^ k) * _M) & _MASK
    if whole < len(data):
        h = ((h ^ int.from_bytes(data[whole:], "little")) * _M) & _MASK
    h ^= h >> 47
    h = (h * _M) & _MASK
    return h ^ (h >> 47)


class _Bits:
    """The key's bit stream: word 0 is the key's Murmur hash, each next word rehashes the last."""

    def __init__(self, key: bytes) -> None:
        self.words = [murmur64a(key)]

    def __call__(self, idx: int) -> int:
        while len(self.words) <= idx >> 6:
            self.words.append(murmur64a(struct.pack("<Q", self.words[-1])))
        return (self.words[idx >> 6] >> (idx & 63)) & 1


def furc(key: bytes, m: int = _MODULUS) -> int:
    """mcrouter's furc_hash: a bucket in [0, m) that moves little when m grows."""
    if m <= 1:
        return 0
    bit = _Bits(key)
    depth = (m - 1).bit_length()
    at = depth
    for _ in range(_TRIES):
        while not bit(at):
            if depth == 0:
                return 0
            depth -= 1
            at = depth
        at += _SHIFT
        num = 1
        for _ in range(depth - 1):
            num = (num << 1) | bit(at)
            at += _SHIFT
        if num < m:
            return num
    return 0


def ring_point(text: str) -> int:
    """Where `text` lands on vllm-router's ring (a 64-bit value)."""
    return murmur64a(struct.pack("<I", furc(text.encode())))
