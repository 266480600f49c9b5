"""Claim 21: the block hash trades speed for collision safety, never hits.

APC's five hash algorithms (sha256 and xxhash, each over pickle or canonical CBOR, and Python's
builtin hash) time the same chain of 16-token blocks per block on this CPU (process time, the
fastest of repeats) in several fresh processes (harness/claims/hash_timing.py), so the speed-up's
interval carries the spread between invocations; the digest width gives the birthday bound on a
collision among a large cache's blocks (computed, not measured); and one workload run per
algorithm shows the same cached tokens request by request.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

from engines.cache.apc.hashing import HASH_ALGOS
from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, UNSURE, Claim, Figure, Finding, sum_up
from harness.claims.strength import ABOVE, BELOW, STRADDLES, describe, interval, side

FOLDER = "21-hash_algos"
# The article states a direction ("xxhash is faster"), no factor: the rule is the log speed-up's
# interval against 0. A factor of our own (1.2x, until this round) sat inside the CBOR pair's spread
# between machines and invocations (1.13x-1.29x), so its label could not reproduce (issue 47).
FASTER = 1.0
PAIRS = (("xxhash", "sha256"), ("xxhash_cbor", "sha256_cbor"))
# Blocks per timing, --quick too: at 2,000 a timing lasted 1-6 ms, short enough that a burst of
# the other test worker's load moved one process's ratio by itself and the label of two quick
# invocations differed (CI, 2026-12-07); 20,000 costs under a second a process.
BLOCKS = 20_000
# --quick runs beside other work (CI's other test worker, and the second invocation of
# tests/live/test_claims_reproduce.py): there 5 processes' t-interval of the CBOR pair straddled 0
# in some invocations and not in others; 9 processes (t 2.31 against 2.78, and 3 against 2.24 for
# the square root) narrow it 1.7x for ~5 s of CPU more. The full run keeps 5.
PROCESSES, QUICK_PROCESSES = 5, 9
REPEATS = 5  # interleaved timings per algorithm in a process, the fastest kept
CACHE_BLOCKS = 10**7  # a large cache's blocks, for the collision bound (~160M tokens at 16)
NONE_HASH_SEED = "claim21"  # every run's chain root from a seed (docs/apc.md §1.5)
STATE = {ABOVE: HOLDS, BELOW: FAILS, STRADDLES: UNSURE}  # a pair's interval against log(FASTER)


def measure(ctx: Context) -> Finding:
    num_blocks, repeats, processes = BLOCKS, REPEATS, ctx.size(QUICK_PROCESSES, PROCESSES)
    timings = [_in_fresh_process(num_blocks, repeats) for _ in range(processes)]
    rows = []
    cached = {}
    for name in HASH_ALGOS.names():
        fn = HASH_ALGOS.get(name).fn
        per_block_us = statistics.median(t[name] for t in timings)
        bits = 8 * len(fn((b"", (0,), None)))
        # A fixed none_hash_seed: the xxhash runs are then reproducible like sha256's, and vLLM's
        # "NONE_HASH is random per process" warning (printed once per such run) does not apply.
        algo = (f"engine.hash_algo={name}", f"engine.none_hash_seed={NONE_HASH_SEED}")
        run = ctx.run(FOLDER, name, (*H100_8B, *WORKLOAD, *ARMS[APC], *algo))
        cached[name] = run.requests.set_index("request_id")["cached_tokens"].sort_index()
        rows.append(
            {
                "algo": name,
                "us_per_block": per_block_us,
                "digest_bits": bits,
                # birthday bound: P(any collision among n blocks) <= n^2 / 2^(bits + 1)
                "collision_bound": min(1.0, CACHE_BLOCKS**2 / 2 ** (bits + 1)),
                "hit_rate": keys.value(run.summary, keys.HIT_RATE),
            }
        )
    # per process, log(sha256 time / xxhash time): the interval over fresh processes decides
    logs = {f"{x}/{s}": interval([math.log(t[s] / t[x]) for t in timings]) for x, s in PAIRS}
    speedups = {k: math.exp(ci.mean) for k, ci in logs.items()}
    same_hits = all(c.equals(cached["sha256"]) for c in cached.values())
    if not same_hits:
        verdict = FAILS
    else:
        states = {k: STATE[side(ci, math.log(FASTER))] for k, ci in logs.items()}
        verdict = sum_up("the serialisation (pickle or CBOR)", states)
    result = (
        "; ".join(
            f"{r['algo']}: {r['us_per_block']:.2f} us a block, {r['digest_bits']}-bit digest (collision "
            f"among {CACHE_BLOCKS:.0e} blocks <= {r['collision_bound']:.1e}), hit rate {r['hit_rate']:.1%}"
            for r in rows
        )
        + "; xxhash over sha256: "
        + ", ".join(
            f"{k} {v:.2f}x faster (log ratio {describe(logs[k])} over {processes} fresh processes)"
            for k, v in speedups.items()
        )
        + f"; cached tokens identical request by request: {'yes' if same_hits else 'no'}"
    )
    return Finding(
        setup=f"{num_blocks:,} chained 16-token blocks hashed per algorithm, fastest of {repeats} interleaved repeats of "
        f"process time in each of {processes} fresh processes on this shared CPU, the Python per-block path "
        f"(hash_block_tokens); one multiturn run per algorithm ({APC}, simulated H100 Llama-3.1-8B) for the "
        "hits; collision safety from the digest width (computed, not measured)",
        measured="microseconds per block, digest bits and the birthday bound, per-request cached tokens",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Block hash cost per algorithm",
            "microseconds per block",
            {"per block": {r["algo"]: r["us_per_block"] for r in rows}},
        ),
        details=rows,
        interval="; ".join(
            f"log({k} speed-up) {describe(ci)} against log({FASTER:g}) = {math.log(FASTER):.3f}"
            for k, ci in logs.items()
        ),
    )


WORKLOAD = (
    "workload=multiturn",
    "workload.num_users=4",
    "workload.num_rounds=3",
)


def _in_fresh_process(num_blocks: int, repeats: int) -> dict[str, float]:
    """One invocation's timings (harness/claims/hash_timing.py) in a new interpreter."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.claims.hash_timing", str(num_blocks), str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    timed: dict[str, float] = json.loads(out.stdout)
    return timed


CLAIM = Claim(
    21,
    "hash_algos",
    "The prefix-cache hash is a trade of speed against collision safety: non-cryptographic xxhash is "
    "faster than sha256, and the choice does not change what is reused.",
    "vLLM --prefix-caching-hash-algo (sha256 default since v0.10.2; xxhash since v0.13.0, PR #29163); the "
    "article",
    "As the article states it (faster, no factor): holds when, for each xxhash variant, the 95% t-interval "
    "over fresh processes (each the fastest of interleaved repeats, process time) of log(sha256 time / "
    "xxhash time) with the same serialisation lies wholly above log(1) = 0, and every algorithm gives the "
    "same cached tokens request by request; does not hold when the hits differ or both intervals lie below "
    "0; depends on the serialisation when one pair holds and the other does not; undecided when an interval "
    "straddles 0 (the spread between invocations on this shared machine, named). The size of the speed-up "
    "is reported, not judged. Collision safety is not measured: the birthday bound from the digest width is "
    "reported beside.",
    measure,
)
