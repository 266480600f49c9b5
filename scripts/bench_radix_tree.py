"""Micro-benchmarks of the radix tree's bookkeeping (issue goals; upstream #38454 for eviction).

    evict_one_leaf_50k   evict one leaf from a tree of 50,000 evictable leaves   goal < 200 us
    match_2048_128_edges match a fully cached 2048-token prompt over 128 edges  goal < 100 us
    insert_2048_128_edges re-insert that prompt (all 128 nodes refreshed)       no goal

`run(quick)` returns one row per case (`case`, `median_us`, `goal_us`, ...); `python
scripts/bench_radix_tree.py [--quick]` prints them as a table. Timings are wall clock, per call.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.cache.radix.allocator import TokenToKVPoolAllocator  # noqa: E402
from engines.cache.radix.clock import LogicalClock  # noqa: E402
from engines.cache.radix.key import RadixKey  # noqa: E402
from engines.cache.radix.tree import UnifiedRadixTree  # noqa: E402


def _row(case: str, samples_ns: list[int], goal_us: float | None, **extra: object) -> dict:
    samples_us = [s / 1000 for s in samples_ns]
    return {
        "case": case,
        "median_us": statistics.median(samples_us),
        "p90_us": sorted(samples_us)[int(0.9 * (len(samples_us) - 1))],
        "goal_us": goal_us,
        "num_calls": len(samples_us),
        **extra,
    }


def bench_evict(num_leaves: int, num_calls: int, seed: int = 0) -> dict:
    """A 2-level tree: 500 shared 8-token prefixes, each with num_leaves/500 4-token leaves."""
    rng = random.Random(seed)
    leaf_len, fanout = 4, 500
    allocator = TokenToKVPoolAllocator(num_leaves * leaf_len + fanout * 8)
    tree = UnifiedRadixTree(1, allocator, clock=LogicalClock())
    prefixes = [[g * 100_000 + i for i in range(8)] for g in range(fanout)]
    order = list(range(num_leaves))
    rng.shuffle(order)  # insertion order decides LRU order
    for leaf in order:
        ids = prefixes[leaf % fanout] + [1_000_000 + leaf * 4 + i for i in range(leaf_len)]
        values = allocator.alloc(len(ids))
        result = tree.insert(RadixKey(ids), values)
        assert result.last_device_node.parent is not None
    assert len(tree.evictable_leaves) == num_leaves
    samples = []
    for _ in range(num_calls):
        t0 = time.perf_counter_ns()
        tree.evict(1)
        samples.append(time.perf_counter_ns() - t0)
    return _row(f"evict_one_leaf_{num_leaves // 1000}k", samples, 200.0, num_leaves=num_leaves)


def _chain_tree(num_tokens: int, num_edges: int) -> tuple[UnifiedRadixTree, list[int]]:
    allocator = TokenToKVPoolAllocator(num_tokens)
    tree = UnifiedRadixTree(1, allocator, clock=LogicalClock())
    ids = list(range(1, num_tokens + 1))
    values = allocator.alloc(num_tokens)
    step = num_tokens // num_edges
    for end in range(step, num_tokens + 1, step):
        tree.insert(RadixKey(ids[:end]), values[:end], prev_prefix_len=end - step)
    return tree, ids


def bench_match(num_calls: int) -> dict:
    tree, ids = _chain_tree(2048, 128)
    key = RadixKey(ids)
    assert tree.match_prefix(key).device_prefix_len == 2048
    samples = []
    for _ in range(num_calls):
        t0 = time.perf_counter_ns()
        tree.match_prefix(key)
        samples.append(time.perf_counter_ns() - t0)
    return _row("match_2048_128_edges", samples, 100.0)


def bench_insert(num_calls: int) -> dict:
    tree, ids = _chain_tree(2048, 128)
    key, values = (
        RadixKey(ids),
        tree.path_device_indices(tree.match_prefix(RadixKey(ids)).last_device_node),
    )
    samples = []
    for _ in range(num_calls):
        t0 = time.perf_counter_ns()
        tree.insert(key, values, prev_prefix_len=2048)
        samples.append(time.perf_counter_ns() - t0)
    return _row("insert_2048_128_edges", samples, None)


def run(quick: bool = False) -> list[dict]:
    calls = 200 if quick else 2000
    return [bench_evict(50_000, calls), bench_match(calls), bench_insert(calls)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    rows = run(parser.parse_args().quick)
    print(f"{'case':<24}{'median_us':>11}{'p90_us':>10}{'goal_us':>9}  ok")
    for r in rows:
        goal = r["goal_us"]
        ok = "-" if goal is None else ("yes" if r["median_us"] < goal else "NO")
        print(
            f"{r['case']:<24}{r['median_us']:>11.1f}{r['p90_us']:>10.1f}{goal if goal else '-':>9}  {ok}"
        )


if __name__ == "__main__":
    main()
