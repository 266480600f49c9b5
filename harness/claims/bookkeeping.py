"""Claim 11: vLLM V1's block bookkeeping is O(1) per block (pre-allocated pool, doubly linked free list).

The free queue's three operations a step performs per block (take the least recently freed block,
take a hit block out of the middle, put a freed block back at the tail), timed per operation on
pools of 1k to 1M blocks, against a plain list and a deque doing the same (whose middle removal
scans). Process CPU time per operation, median of repeats; the verdict reads growth, not speed.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from engines.cache import apc
from engines.cache.apc.block import FreeKVCacheBlockQueue, KVCacheBlock
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, undecided

FLAT = 3.0  # per-operation cost at the largest pool within 3x of the smallest: flat
GROWS = 10.0  # the baseline must grow at least 10x, else the sizes cannot tell O(1) from O(n)
OPS = 200  # middle removals + tail appends + head pops per measurement
REPEATS = 5


def measure(ctx: Context) -> Finding:
    sizes = ctx.size((1_000, 10_000, 100_000), (1_000, 10_000, 100_000, 1_000_000))
    rows = []
    for n in sizes:
        rng = random.Random(n)
        rows.append(
            {
                "blocks": n,
                "linked_us": 1e6 * _median_op(partial(_linked, n, rng)),
                "deque_us": 1e6 * _median_op(partial(_deque, n, rng)),
            }
        )
    first, last = rows[0], rows[-1]
    linked_growth = last["linked_us"] / first["linked_us"]
    base_growth = last["deque_us"] / first["deque_us"]
    if base_growth < GROWS:
        verdict = undecided(f"the baseline grew only {base_growth:.1f}x, the sizes cannot tell")
    else:
        verdict = HOLDS if linked_growth <= FLAT else FAILS
    result = (
        "; ".join(
            f"{r['blocks']:,} blocks: linked {r['linked_us']:.2f} us/op, deque {r['deque_us']:.2f} us/op"
            for r in rows
        )
        + f"; growth {first['blocks']:,} -> {last['blocks']:,}: linked {linked_growth:.1f}x, deque "
        f"{base_growth:.1f}x"
    )
    return Finding(
        setup=f"{apc.DESIGN.source}block.py FreeKVCacheBlockQueue vs collections.deque, pools of "
        f"{', '.join(f'{n:,}' for n in sizes)} blocks, {OPS} x (middle removal, tail append, head pop); this "
        "CPU, process time",
        measured="CPU time per operation, median of 5 repeats",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Free-queue cost per operation",
            "us per operation",
            {f"{r['blocks']:,}": {"linked": r["linked_us"], "deque": r["deque_us"]} for r in rows},
        ),
        details=rows,
    )


CLAIM = Claim(
    11,
    "bookkeeping",
    "V1's block bookkeeping is O(1) per block, thanks to the pre-allocated block pool and the doubly "
    "linked free list.",
    "vLLM V1 prefix caching design doc (FreeKVCacheBlockQueue); vLLM V1 alpha blog",
    "Holds when the linked free queue's per-operation CPU time (remove from the middle, append at the "
    "tail, pop the head; median of 5 repeats) at the largest pool (1M blocks; quick: 100k) is within 3x "
    "of the smallest (1k) while the list/deque baseline's grows >= 10x over the same sizes; does not "
    "hold when the linked queue grows more than 3x; undecided when the baseline does not grow 10x.",
    measure,
)


def _median_op(run: Callable[[], float]) -> float:
    times = sorted(run() for _ in range(REPEATS))
    return times[len(times) // 2] / (3 * OPS)


def _linked(n: int, rng: random.Random) -> float:
    blocks = [KVCacheBlock(i) for i in range(n)]
    queue = FreeKVCacheBlockQueue(blocks)
    picks = [blocks[rng.randrange(1, n - 1)] for _ in range(OPS)]
    picks = list(dict.fromkeys(picks))
    start = time.process_time()
    for blk in picks:
        queue.remove(blk)  # a hit on a free cached block
    for blk in picks:
        queue.append(blk)  # freed again
    for _ in picks:
        queue.popleft()  # evict the least recently freed
    return (time.process_time() - start) * OPS / len(picks)


def _deque(n: int, rng: random.Random) -> float:
    queue = deque(range(n))
    picks = list(dict.fromkeys(rng.randrange(1, n - 1) for _ in range(OPS)))
    start = time.process_time()
    for b in picks:
        queue.remove(b)  # scans: O(n)
    for b in picks:
        queue.append(b)
    for _ in picks:
        queue.popleft()
    return (time.process_time() - start) * OPS / len(picks)
