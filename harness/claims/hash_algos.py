"""Claim 21: the block hash trades speed for collision safety, never hits.

APC's five hash algorithms (sha256 and xxhash, each over pickle or canonical CBOR, and Python's
builtin hash) time the same chain of 16-token blocks per block on this CPU (process time, the
median of repeats); the digest width gives the birthday bound on a collision among a large
cache's blocks; and one workload run per algorithm shows the same cached tokens request by
request.
"""

from __future__ import annotations

import statistics
import time

from engines.cache.apc.hashing import HASH_ALGOS, hash_block_tokens
from harness.claims import keys
from harness.claims.arms import APC, ARMS, H100_8B
from harness.claims.experiment import Context
from harness.claims.record import FAILS, HOLDS, Claim, Figure, Finding, depends

FOLDER = "21-hash_algos"
FASTER = 1.2  # xxhash must hash a block at least this much faster than its sha256 counterpart
PAIRS = (("xxhash", "sha256"), ("xxhash_cbor", "sha256_cbor"))
BLOCK = 16
CACHE_BLOCKS = 10**7  # a large cache's blocks, for the collision bound (~160M tokens at 16)
NONE = b"\x00" * 32  # the chain's root; any fixed value, the same for every algorithm
NONE_HASH_SEED = "claim21"  # every run's chain root from a seed (docs/apc.md §1.5)


def measure(ctx: Context) -> Finding:
    num_blocks, repeats = ctx.size(2_000, 20_000), ctx.size(3, 5)
    blocks = [tuple(range(i * BLOCK, (i + 1) * BLOCK)) for i in range(num_blocks)]
    rows = []
    cached = {}
    for name in HASH_ALGOS.names():
        fn = HASH_ALGOS.get(name).fn
        per_block_us = (
            statistics.median(_time(fn, blocks) for _ in range(repeats)) / num_blocks * 1e6
        )
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
    by = {r["algo"]: r for r in rows}
    speedups = {f"{x}/{s}": by[s]["us_per_block"] / by[x]["us_per_block"] for x, s in PAIRS}
    same_hits = all(c.equals(cached["sha256"]) for c in cached.values())
    fast = [v >= FASTER for v in speedups.values()]
    if not same_hits:
        verdict = FAILS
    elif all(fast):
        verdict = HOLDS
    elif not any(fast):
        verdict = FAILS
    else:
        verdict = depends("the serialisation (pickle or CBOR)")
    result = (
        "; ".join(
            f"{r['algo']}: {r['us_per_block']:.2f} us a block, {r['digest_bits']}-bit digest (collision "
            f"among {CACHE_BLOCKS:.0e} blocks <= {r['collision_bound']:.1e}), hit rate {r['hit_rate']:.1%}"
            for r in rows
        )
        + "; xxhash over sha256: "
        + ", ".join(f"{k} {v:.2f}x faster" for k, v in speedups.items())
        + f"; cached tokens identical request by request: {'yes' if same_hits else 'no'}"
    )
    return Finding(
        setup=f"{num_blocks:,} chained 16-token blocks hashed per algorithm, median of {repeats} repeats of "
        "process time on this CPU, the Python per-block path (hash_block_tokens); one multiturn run per "
        f"algorithm ({APC}, simulated H100 Llama-3.1-8B) for the hits",
        measured="microseconds per block, digest bits and the birthday bound, per-request cached tokens",
        result=result,
        verdict=verdict,
        figure=Figure(
            "Block hash cost per algorithm",
            "microseconds per block",
            {"per block": {r["algo"]: r["us_per_block"] for r in rows}},
        ),
        details=rows,
        interval=f"median of {repeats} timing repeats per algorithm (no interval: a speed ratio of one process)",
    )


WORKLOAD = (
    "workload=multiturn",
    "workload.num_users=4",
    "workload.num_rounds=3",
)


def _time(fn, blocks: list[tuple[int, ...]]) -> float:
    parent = NONE
    start = time.process_time()
    for block in blocks:
        parent = hash_block_tokens(fn, parent, block, none_hash=NONE)
    return time.process_time() - start


CLAIM = Claim(
    21,
    "hash_algos",
    "The prefix-cache hash is a trade of speed against collision safety: non-cryptographic xxhash is "
    "faster than sha256, and the choice does not change what is reused.",
    "vLLM --prefix-caching-hash-algo (sha256 default since v0.10.2; xxhash since v0.13.0, PR #29163); the "
    "article",
    "Holds when each xxhash variant hashes a block at least 1.2x faster than its sha256 counterpart with the "
    "same serialisation (median of repeats, process time) and every algorithm gives the same cached tokens "
    "request by request; does not hold when the hits differ or neither xxhash variant is 1.2x faster; "
    "depends on the serialisation when one is. Collision bounds (birthday, from the digest width) reported "
    "beside.",
    measure,
)
