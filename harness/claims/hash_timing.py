"""`python -m harness.claims.hash_timing BLOCKS REPEATS`: claim 21's per-block hash timing, once.

Each algorithm hashes the same chain of 16-token blocks REPEATS times (process time, the fastest
kept), the algorithms interleaved repeat by repeat (in a rotated order) so that a burst of load on
this shared machine falls on all of them alike; prints {algorithm: microseconds a block} as JSON. Claim 21 runs it in several fresh
processes, so its verdict carries the spread between invocations, not only within one.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from engines.cache.apc.hashing import HASH_ALGOS, hash_block_tokens

BLOCK = 16
NONE = b"\x00" * 32  # the chain's root; any fixed value, the same for every algorithm


def per_block_us(num_blocks: int, repeats: int) -> dict[str, float]:
    blocks = [tuple(range(i * BLOCK, (i + 1) * BLOCK)) for i in range(num_blocks)]
    names = list(HASH_ALGOS.names())
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(_time(HASH_ALGOS.get(name).fn, blocks))
    # The fastest repeat, as timeit keeps it: another job on this shared box only ever adds time
    # to a timing (a core or a cache shared); the median of five still moved with a load beside it.
    return {name: min(seconds[name]) / num_blocks * 1e6 for name in names}


def _time(fn: Callable[..., bytes], blocks: list[tuple[int, ...]]) -> float:
    parent = NONE
    start = time.process_time()
    for block in blocks:
        parent = hash_block_tokens(fn, parent, block, none_hash=NONE)
    return time.process_time() - start


if __name__ == "__main__":
    print(json.dumps(per_block_us(int(sys.argv[1]), int(sys.argv[2]))))
