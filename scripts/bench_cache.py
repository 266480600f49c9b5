"""Micro-benchmark of prefix-cache bookkeeping: microseconds per 2048-token request.

Cases: match + allocate + free at 0% hit (steady state: every new block evicts a cached one)
and at ~90% hit (1843 shared tokens), for APC through its native manager once per hash function,
and for every registered cache through the common protocol (Admission.schedule + finish_step).
Baseline: the raw cost of hashing the prompt's 128 blocks with the same hasher, per function.
Usage: python scripts/bench_cache.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.cache import CACHES, build_cache  # noqa: E402
from engines.cache.apc import ApcCache  # noqa: E402
from engines.cache.apc.hashing import HASH_ALGOS, RequestBlockHashes, RequestHasher, init_none_hash  # noqa: E402
from engines.cache.base import StepBudget  # noqa: E402
from engines.config import EngineConfig  # noqa: E402
from engines.sequence import SeqStatus, Sequence  # noqa: E402

PROMPT_LEN = 2048
SHARED_LEN = 1843  # 115 full blocks of 16 shared: a 1840/2048 = 89.8% hit
BLOCK_SIZE = 16
POOL_REQUESTS = 16  # pool capacity, in 2048-token requests
ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "builtin")
PRESET_BLOCK_SIZE = {"radix": 1}  # engine presets: radix runs at page size 1, the rest at 16


class Prompts:
    """Fresh prompts with a controlled hit: a new first token (0%) or a shared prefix (~90%)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.base = self._tokens(PROMPT_LEN)
        self.count = 0

    def _tokens(self, n: int) -> list[int]:
        return self.rng.choices(range(1, 50_000), k=n)

    def next(self, hit: bool) -> list[int]:
        self.count += 1
        if hit:
            return self.base[:SHARED_LEN] + self._tokens(PROMPT_LEN - SHARED_LEN)
        return [100_000 + self.count] + self._tokens(PROMPT_LEN - 1)


def _median_us(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1000.0


def _measure(
    one_request: Callable[[Sequence], None], hit: bool, num_warmup: int, num_repeats: int
) -> float:
    """Median time of one_request(seq); the Sequence (the scheduler's object) is built untimed."""
    prompts = Prompts()
    for i in range(num_warmup):  # fill the pool, so 0%-hit requests evict as in a steady state
        one_request(Sequence(f"w{i}", prompts.next(hit), PROMPT_LEN, 1))
    gc.collect()
    samples = []
    for i in range(num_repeats):
        seq = Sequence(f"r{i}", prompts.next(hit), PROMPT_LEN, 1)
        t0 = time.perf_counter_ns()
        one_request(seq)
        samples.append(time.perf_counter_ns() - t0)
    return _median_us(samples)


def bench_hash(algo: str, num_repeats: int) -> float:
    hasher = RequestHasher(HASH_ALGOS.get(algo).fn, init_none_hash(algo, "0"), BLOCK_SIZE)
    prompts = Prompts()
    samples = []
    for _ in range(num_repeats):
        tokens = prompts.next(False)
        memo = RequestBlockHashes(None, None, None)
        t0 = time.perf_counter_ns()
        hasher.extend(memo, tokens)
        samples.append(time.perf_counter_ns() - t0)
    return _median_us(samples)


def bench_apc_native(algo: str, hit: bool, num_warmup: int, num_repeats: int) -> float:
    """KVCacheManager: get_computed_blocks + allocate_slots (caches at allocation) + free."""
    num_blocks = POOL_REQUESTS * PROMPT_LEN // BLOCK_SIZE + 1
    mgr = ApcCache(num_blocks, BLOCK_SIZE, hash_algo=algo, none_hash_seed="0").manager

    def one_request(seq: Sequence) -> None:
        blocks, num_hit = mgr.get_computed_blocks(seq)
        mgr.allocate_slots(seq, PROMPT_LEN - num_hit, num_hit, blocks)
        mgr.forget(seq)

    return _measure(one_request, hit, num_warmup, num_repeats)


def bench_protocol(name: str, hit: bool, num_warmup: int, num_repeats: int) -> float:
    """Any cache through Admission.schedule + finish_step (the generic scheduler's calls)."""
    block_size = PRESET_BLOCK_SIZE.get(name, BLOCK_SIZE)
    config = EngineConfig(
        cache=name, block_size=block_size, kv_capacity_tokens=POOL_REQUESTS * PROMPT_LEN
    )
    cache, admission = build_cache(config)
    budget = StepBudget(max_num_seqs=1, max_num_batched_tokens=PROMPT_LEN)

    def one_request(seq: Sequence) -> None:
        waiting, running = deque([seq]), []
        plan = admission.schedule(waiting, running, budget)
        seq.num_computed_tokens = PROMPT_LEN
        seq.token_ids.append(7)
        seq.status = SeqStatus.FINISHED
        running.clear()
        admission.finish_step(plan, [seq])

    return _measure(one_request, hit, num_warmup, num_repeats)


def _radix_rows(quick: bool) -> list[dict]:
    path = ROOT / "scripts" / "bench_radix_tree.py"
    if not path.exists():
        return []
    spec = importlib.util.spec_from_file_location("bench_radix_tree", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.run(quick)) if hasattr(module, "run") else []


def run(quick: bool) -> list[dict]:
    num_repeats = 25 if quick else 200
    num_warmup = POOL_REQUESTS + 4
    rows = []
    hash_us = {algo: bench_hash(algo, num_repeats) for algo in ALGOS}
    for algo in ALGOS:
        rows.append(
            dict(
                case="hash 128 blocks",
                cache="apc",
                hash_algo=algo,
                hit_pct=None,
                median_us=hash_us[algo],
                ratio_to_hash=1.0,
            )
        )
    for hit in (False, True):
        for algo in ALGOS:
            us = bench_apc_native(algo, hit, num_warmup, num_repeats)
            rows.append(
                dict(
                    case="native match+allocate+free",
                    cache="apc",
                    hash_algo=algo,
                    hit_pct=90 if hit else 0,
                    median_us=us,
                    ratio_to_hash=us / hash_us[algo],
                )
            )
        for name in CACHES.names():
            us = bench_protocol(name, hit, num_warmup, num_repeats)
            algo = "sha256" if name == "apc" else None
            rows.append(
                dict(
                    case="protocol schedule+finish",
                    cache=name,
                    hash_algo=algo,
                    hit_pct=90 if hit else 0,
                    median_us=us,
                    ratio_to_hash=us / hash_us["sha256"] if algo else None,
                )
            )
    return rows + _radix_rows(quick)


def format_table(rows: list[dict]) -> str:
    cols = ("case", "cache", "hash_algo", "hit_pct", "median_us", "ratio_to_hash")
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    rows = run(args.quick)
    print(format_table(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"prompt_tokens": PROMPT_LEN, "block_size": BLOCK_SIZE, "rows": rows}, indent=2
            )
        )


if __name__ == "__main__":
    main()
