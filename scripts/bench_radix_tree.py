"""Micro-benchmarks of the radix tree's and slot allocator's bookkeeping (issue goals; #38454).

    evict_one_leaf_50k       evict one leaf from a tree of ~50,000 evictable leaves   goal 5 us
    match_2048_128_edges     match a cached 2048-token prompt over 128 edges (key     goal 20 us
                             built once: the tree walk)
    match_2048_fresh_key     the same with a new key per call (packs 2048 tokens)    no goal
    insert_2048_128_edges    re-insert that prompt (all 128 nodes refreshed)         no goal
    alloc_free_2048          alloc 2048 slots and free them, per slot                goal 10 ns
    checkpoint_8k_of_127k    the slots a checkpoint rewrites: the last 8192 of a     no goal
                             126,976-token path over 248 edges

Cases run in interleaved rounds (bench_pairs.py); each sample is the median per-call time of one
batch. `--baseline DIR` measures another checkout side by side and prints after/before ratios.
Usage: python scripts/bench_radix_tree.py [--quick] [--rounds N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import bench_pairs

bench_pairs.use_root(sys.argv)

from engines.cache.radix.allocator import TokenToKVPoolAllocator  # noqa: E402
from engines.cache.radix.key import RadixKey  # noqa: E402
from engines.cache.radix.recency import LogicalClock  # noqa: E402
from engines.cache.radix.tree import UnifiedRadixTree  # noqa: E402

GOALS = {  # case -> (unit, goal)
    "evict_one_leaf_50k": ("us", 5.0),
    "match_2048_128_edges": ("us", 20.0),
    "match_2048_fresh_key": ("us", None),
    "insert_2048_128_edges": ("us", None),
    "alloc_free_2048": ("ns/slot", 10.0),
    "checkpoint_8k_of_127k": ("us", None),
}


def _batch_us(fn, num_calls: int) -> float:
    """Median wall time of fn() over num_calls calls, in microseconds."""
    samples = []
    for _ in range(num_calls):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000


def evict_case(num_leaves: int, num_calls: int, seed: int = 0):
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
        tree.insert(RadixKey(ids), allocator.alloc(len(ids)))
    assert len(tree.evictable_leaves) == num_leaves
    return lambda: _batch_us(lambda: tree.evict(1), num_calls)


def _chain_tree(num_tokens: int, num_edges: int) -> tuple[UnifiedRadixTree, list[int]]:
    allocator = TokenToKVPoolAllocator(num_tokens)
    tree = UnifiedRadixTree(1, allocator, clock=LogicalClock())
    ids = list(range(1, num_tokens + 1))
    values = allocator.alloc(num_tokens)
    assert values is not None  # a fresh pool of num_tokens slots
    step = num_tokens // num_edges
    for end in range(step, num_tokens + 1, step):
        tree.insert(RadixKey(ids[:end]), values[:end], prev_prefix_len=end - step)
    return tree, ids


def match_case(num_calls: int, fresh_key: bool):
    tree, ids = _chain_tree(2048, 128)
    key = RadixKey(ids)
    assert tree.match_prefix(key).device_prefix_len == 2048
    if fresh_key:
        return lambda: _batch_us(lambda: tree.match_prefix(RadixKey(ids)), num_calls)
    return lambda: _batch_us(lambda: tree.match_prefix(key), num_calls)


def insert_case(num_calls: int):
    tree, ids = _chain_tree(2048, 128)
    key = RadixKey(ids)
    values = tree.path_device_indices(tree.match_prefix(key).last_device_node)
    return lambda: _batch_us(lambda: tree.insert(key, values, prev_prefix_len=2048), num_calls)


def alloc_free_case(num_calls: int, num_slots: int = 2048):
    allocator = TokenToKVPoolAllocator(1 << 20)

    def once() -> None:
        slots = allocator.alloc(num_slots)
        assert slots is not None  # the pool holds num_slots
        allocator.free(slots)

    return lambda: _batch_us(once, num_calls) * 1000 / num_slots


def checkpoint_case(num_calls: int, edge: int = 512, num_edges: int = 248, suffix: int = 8192):
    tree, ids = _chain_tree(edge * num_edges, num_edges)
    last = tree.match_prefix(RadixKey(ids)).last_device_node
    start = edge * num_edges - suffix
    fetch = getattr(tree, "path_device_suffix", None)  # absent before the suffix fetch existed
    if fetch is not None:
        return lambda: _batch_us(lambda: fetch(last, start), num_calls)
    return lambda: _batch_us(lambda: tree.path_device_indices(last)[start:], num_calls)


def build_cases(quick: bool) -> dict:
    """Case name -> set-up function (run only for the selected cases)."""
    calls = 100 if quick else 300
    return {
        "evict_one_leaf_50k": lambda: evict_case(50_000, calls),
        "match_2048_128_edges": lambda: match_case(calls, fresh_key=False),
        "match_2048_fresh_key": lambda: match_case(calls, fresh_key=True),
        "insert_2048_128_edges": lambda: insert_case(calls),
        "alloc_free_2048": lambda: alloc_free_case(calls),
        "checkpoint_8k_of_127k": lambda: checkpoint_case(calls // 4),
    }


def rows_here(rounds: list[dict]) -> list[dict]:
    rows = []
    for case in rounds[0]:
        unit, goal = GOALS[case]
        s = bench_pairs.stats([r[case] for r in rounds])
        rows.append(
            {
                "case": case,
                "unit": unit,
                "median": s["median"],
                "min": s["min"],
                "goal": goal,
                "median/goal": s["median"] / goal if goal else None,
                "rounds": s["n"],
            }
        )
    return rows


def rows_against(before: list[dict], after: list[dict]) -> list[dict]:
    rows = []
    for case in after[0]:
        unit, goal = GOALS[case]
        b, a = [r[case] for r in before], [r[case] for r in after]
        ratio = bench_pairs.paired(a, b)
        rows.append(
            {
                "case": case,
                "unit": unit,
                "before": statistics.median(b),
                "after": statistics.median(a),
                "goal": goal,
                "after/before median": ratio["median"],
                "after/before min": ratio["min"],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench_pairs.add_common_args(parser)
    args = parser.parse_args()
    num_rounds = args.rounds or (6 if args.quick else 20)
    if args.serve:
        bench_pairs.serve(bench_pairs.select(build_cases(args.quick), args.cases))
        return
    if args.baseline is None:
        cases = bench_pairs.select(build_cases(args.quick), args.cases)
        rows = rows_here(bench_pairs.rounds_in_process(cases, num_rounds))
        print(bench_pairs.table(rows, tuple(rows[0])))
        return
    here = Path(__file__).resolve().parents[1]
    extra = ["--cases", args.cases] + (["--quick"] if args.quick else [])
    before, after = bench_pairs.rounds_against(
        Path(__file__).resolve(), args.baseline, here, extra, num_rounds
    )
    rows = rows_against(before, after)
    print(bench_pairs.table(rows, tuple(rows[0])))


if __name__ == "__main__":
    main()
