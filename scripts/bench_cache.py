"""Micro-benchmark of prefix-cache bookkeeping: microseconds per request of --prompt-len tokens.

Cases: match + allocate + free at 0% hit (steady state: every new block evicts a cached one)
and at ~90% hit (a shared prefix of 90% of the prompt, whole blocks), for APC through its native
manager once per hash function, and for every registered cache through the common protocol
(Scheduler.schedule + finish_step). Baseline: the raw cost of hashing the prompt's blocks with
the same hasher. All cases run in interleaved rounds (bench_pairs.py); ratios to the hash baseline
are paired within rounds. `--baseline DIR` measures another checkout side by side and prints
after/before ratios per case (goal: APC admission at 4,096 tokens <= 0.8x).
Usage: python scripts/bench_cache.py [--quick] [--prompt-len N] [--baseline DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path

import bench_pairs
import numpy as np

bench_pairs.use_root(sys.argv)

from engines.cache import DESIGNS, apc  # noqa: E402
from engines.cache.apc import ApcCache  # noqa: E402
from engines.cache.apc.hashing import (  # noqa: E402
    HASH_ALGOS,
    RequestBlockHashes,
    RequestHasher,
    init_none_hash,
)
from engines.config import EngineConfig  # noqa: E402
from engines.sched.base import StepBudget, build_scheduler  # noqa: E402
from engines.sequence import SeqStatus, Sequence  # noqa: E402

BLOCK_SIZE = 16
POOL_REQUESTS = 16  # pool capacity, in prompts
ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "builtin")
SHARED_FRACTION = 0.9


class Prompts:
    """Fresh prompts with a controlled hit: a new first token (0%) or a shared prefix (~90%)."""

    def __init__(self, prompt_len: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.prompt_len = prompt_len
        self.shared_len = int(prompt_len * SHARED_FRACTION) // BLOCK_SIZE * BLOCK_SIZE + 3
        self.base = self._tokens(prompt_len)
        self.count = 0

    def _tokens(self, n: int) -> list[int]:
        return self.rng.integers(1, 50_000, n).tolist()

    def next(self, hit: bool) -> list[int]:
        self.count += 1
        if hit:
            return self.base[: self.shared_len] + self._tokens(self.prompt_len - self.shared_len)
        return [100_000 + self.count] + self._tokens(self.prompt_len - 1)


def request_case(
    one_request: Callable[[Sequence], None], prompt_len: int, hit: bool, batch: int
) -> bench_pairs.Case:
    """A sample is the median time of one_request over `batch` requests (Sequences built untimed);
    the pool is filled first, so 0%-hit requests evict as in a steady state."""
    prompts = Prompts(prompt_len)
    for i in range(POOL_REQUESTS + 4):
        one_request(Sequence(f"w{i}", prompts.next(hit), prompt_len, 1))

    def sample() -> float:
        seqs = [Sequence(f"r{i}", prompts.next(hit), prompt_len, 1) for i in range(batch)]
        gc.collect()
        times = []
        for seq in seqs:
            t0 = time.perf_counter_ns()
            one_request(seq)
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times) / 1000

    return sample


def hash_case(algo: str, prompt_len: int, batch: int) -> bench_pairs.Case:
    hasher = RequestHasher(HASH_ALGOS.get(algo).fn, init_none_hash(algo, "0"), BLOCK_SIZE)
    prompts = Prompts(prompt_len)

    def sample() -> float:
        times = []
        for _ in range(batch):
            tokens, memo = prompts.next(False), RequestBlockHashes(None, None, None)
            t0 = time.perf_counter_ns()
            hasher.extend(memo, tokens)
            times.append(time.perf_counter_ns() - t0)
        return statistics.median(times) / 1000

    return sample


def apc_native(algo: str, prompt_len: int) -> Callable[[Sequence], None]:
    """KVCacheManager: get_computed_blocks + allocate_slots (caches at allocation) + free."""
    num_blocks = POOL_REQUESTS * prompt_len // BLOCK_SIZE + 1
    mgr = ApcCache(num_blocks, BLOCK_SIZE, hash_algo=algo, none_hash_seed="0").manager

    def one_request(seq: Sequence) -> None:
        blocks, num_hit = mgr.get_computed_blocks(seq)
        mgr.allocate_slots(seq, prompt_len - num_hit, num_hit, blocks)
        mgr.forget(seq)

    return one_request


def protocol(name: str, prompt_len: int) -> Callable[[Sequence], None]:
    """Any cache through Scheduler.schedule + finish_step (the generic scheduler's calls)."""
    block_size = DESIGNS.get(name).block_size  # its preset's granularity
    config = EngineConfig(
        cache=name,
        block_size=block_size,
        kv_capacity_tokens=POOL_REQUESTS * prompt_len,
        max_num_batched_tokens=prompt_len,
    )
    scheduler = build_scheduler(config)
    budget = StepBudget(max_num_seqs=1, max_num_batched_tokens=prompt_len)

    def one_request(seq: Sequence) -> None:
        waiting, running = deque([seq]), list[Sequence]()
        plan = scheduler.schedule(waiting, running, budget)
        seq.num_computed_tokens = prompt_len
        seq.token_ids.append(7)
        seq.status = SeqStatus.FINISHED
        running.clear()
        scheduler.finish_step(plan, [seq])

    return one_request


def build_cases(prompt_len: int, quick: bool) -> dict[str, Callable[[], bench_pairs.Case]]:
    """Case name -> set-up function (run only for the selected cases)."""
    batch = 8 if quick else 25

    def requests(make: Callable[..., Callable[[Sequence], None]], arg: str, hit: bool):
        return lambda: request_case(make(arg, prompt_len), prompt_len, hit, batch)

    factories: dict[str, Callable[[], bench_pairs.Case]] = {
        f"hash/{a}": partial(hash_case, a, prompt_len, batch) for a in ALGOS
    }
    for hit in (0, 90):
        for a in ALGOS:
            factories[f"native/{a}/{hit}%"] = requests(apc_native, a, hit > 0)
        for name in DESIGNS.names():
            factories[f"protocol/{name}/{hit}%"] = requests(protocol, name, hit > 0)
    return factories


def _baseline_of(case: str) -> str | None:
    """The hash case a request case is paired with (APC only: what its hash chain costs)."""
    parts = case.split("/")
    if parts[0] == "native":
        return f"hash/{parts[1]}"
    if parts[0] == "protocol" and parts[1] == apc.DESIGN.name:
        return "hash/sha256"
    return None


def rows_here(rounds: list[dict[str, float]]) -> list[dict]:
    rows = []
    for case in rounds[0]:
        values = [r[case] for r in rounds]
        base = _baseline_of(case)
        ratio = (
            bench_pairs.paired(values, [r[base] for r in rounds])
            if base is not None and base in rounds[0]
            else None
        )
        rows.append(
            {
                "case": case,
                "median_us": statistics.median(values),
                "min_us": min(values),
                "ratio_to_hash median": ratio["median"] if ratio else None,
                "ratio_to_hash min": ratio["min"] if ratio else None,
            }
        )
    return rows


def rows_against(before: list[dict], after: list[dict]) -> list[dict]:
    rows = []
    for case in after[0]:
        b, a = [r[case] for r in before], [r[case] for r in after]
        ratio = bench_pairs.paired(a, b)
        rows.append(
            {
                "case": case,
                "before_us": statistics.median(b),
                "after_us": statistics.median(a),
                "after/before median": ratio["median"],
                "after/before min": ratio["min"],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench_pairs.add_common_args(parser)
    parser.add_argument(
        "--prompt-len", type=bench_pairs.positive_int, default=4096, help="tokens per prompt"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    if args.prompt_len < BLOCK_SIZE or args.prompt_len % BLOCK_SIZE:
        parser.error(f"--prompt-len {args.prompt_len} is not a multiple of {BLOCK_SIZE}")
    num_rounds = args.rounds or (4 if args.quick else 12)
    if args.serve:
        bench_pairs.serve(bench_pairs.select(build_cases(args.prompt_len, args.quick), args.cases))
        return
    if args.baseline is None:
        cases = bench_pairs.select(build_cases(args.prompt_len, args.quick), args.cases)
        rows = rows_here(bench_pairs.rounds_in_process(cases, num_rounds))
    else:
        here = Path(__file__).resolve().parents[1]
        extra = ["--prompt-len", str(args.prompt_len), "--cases", args.cases]
        extra += ["--quick"] if args.quick else []
        before, after = bench_pairs.rounds_against(
            Path(__file__).resolve(), args.baseline, here, extra, num_rounds
        )
        rows = rows_against(before, after)
    print(bench_pairs.table(rows, tuple(rows[0])))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"prompt_tokens": args.prompt_len, "block_size": BLOCK_SIZE, "rows": rows}
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
