"""The routing twin's score against the real routers at several fleet sizes and concurrencies
(docs/fleet.md §5): per case, one router start per repeat over built-in workers started once per
size (harness/routers/fleet.py `route_through`), a small stream that spreads over the workers,
and one table line per start: scored predicted / total, guesses, misses by cause, the split.

    python scripts/fleet_twin_scores.py --workers 3 4 --concurrency 1 4 --starts 2 \
        --cases vllm:round_robin sglang:cache_aware --out results/fleet-twin-scores

Bounded: stops starting routers once --budget-s has passed (the lines so far are kept), and every
process it starts is stopped by its PID (harness.routers.fleet.processes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.errors import BadInput  # noqa: E402
from harness.fleet.config import FleetConfig  # noqa: E402
from harness.fleet.policies import Routed  # noqa: E402
from harness.routers.drive import Decision, order_only  # noqa: E402
from harness.routers.fleet import (  # noqa: E402
    TWINNED,
    route_through,
    router_available,
    streams,
    worker_fleet,
)
from harness.routers.streams import load_stream  # noqa: E402

LOAD_CASE = "kv_aware+load"  # kv_aware on a stream where in-flight load moves its decisions

DEFAULT_CASES = [
    "sglang:round_robin",
    "vllm:round_robin",
    "sglang:cache_aware",
    "vllm:cache_aware",
    "vllm:consistent_hash",
    "vllm:kv_aware",
    "vllm:kv_aware+load",
]
HEADER = (
    "| router | policy | workers | concurrency | scored predicted / total | guesses right / made "
    "| misses by cause | requests per worker |"
)


def parse_case(text: str) -> tuple[str, str]:
    kind, _, policy = text.partition(":")
    if policy not in TWINNED.get(kind, ()) and (kind, policy) != ("vllm", LOAD_CASE):
        valid = ", ".join(
            [*(f"{k}:{p}" for k, ps in TWINNED.items() for p in ps), f"vllm:{LOAD_CASE}"]
        )
        raise BadInput(f"--cases {text!r} is not a router:policy the twin models; valid: {valid}")
    return kind, policy


def stream_size(policy: str, workers: int, concurrency: int) -> tuple[int, int]:
    """(groups, per group): enough groups that a spreading policy reaches every worker, and
    at least 24 requests, two waves of `concurrency` at the least."""
    groups = max(3, workers) if policy != "consistent_hash" else 3 * workers
    total = max(24, 2 * concurrency)
    return groups, max(2, -(-total // groups))


def case_stream(
    policy: str, workers: int, concurrency: int
) -> tuple[list[Routed], list[tuple[int, Routed]]]:
    """The stream of a case; `kv_aware+load`: waves of one group each, long and short prefixes
    placed (harness/routers/streams.py load_stream), where in-flight load moves decisions."""
    if policy == LOAD_CASE:
        return load_stream(workers, (256, 16, 256, 16, 16, 256), max(concurrency, 4))
    groups, per = stream_size(policy, workers, concurrency)
    return streams(policy, groups, per, workers)


def causes(decisions: Sequence[Decision]) -> str:
    """Each scored miss's cause: cache_aware's replayed cause (tie, arrival, other); for the
    other policies a miss in a wave whose workers are right is arrival order, the rest other."""
    missed = [d for d in decisions if d.learned and d.predicted != d.actual]
    if not missed:
        return "none"
    found = Counter(d.cause for d in missed if d.cause)
    unexplained = len(missed) - sum(found.values())
    if unexplained:
        arrival = min(order_only([d for d in decisions if d.learned]), unexplained)
        found["arrival"] += arrival
        found["other"] += unexplained - arrival
    return ", ".join(f"{k} {v}" for k, v in sorted(found.items()) if v)


def line(kind: str, policy: str, n: int, k: int, decisions: Sequence[Decision]) -> str:
    scored = [d for d in decisions if d.learned]
    equal = sum(d.predicted == d.actual for d in scored)
    split = Counter(d.actual for d in decisions)
    guesses = [d for d in decisions if not d.learned]
    right = sum(d.predicted == d.actual for d in guesses)
    guessed = f"{right} / {len(guesses)}" if guesses else "0"
    share = "/".join(str(split.get(i, 0)) for i in range(n))
    return (
        f"| {kind}-router | {policy} | {n} | {k} | {equal} / {len(scored)} "
        f"| {guessed} | {causes(decisions)} | {share} |"
    )


def run(args: argparse.Namespace) -> int:
    cases = [parse_case(c) for c in args.cases]
    missing = sorted({k for k, _ in cases if not router_available(k)})
    if missing:
        raise BadInput(
            f"not installed: {', '.join(missing)}-router (bash scripts/setup_routers.sh)"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = out / "table.md"
    lines = [HEADER, "|" + "---|" * 8]
    deadline = time.monotonic() + args.budget_s
    for n in args.workers:
        with worker_fleet(n, out / f"x{n}") as fleet:
            for kind, policy in cases:
                for k in args.concurrency:
                    stream, warm = case_stream(policy, n, k)
                    cfg = FleetConfig(replicas=n, router=policy.removesuffix("+load"))
                    for s in range(args.starts):
                        if time.monotonic() > deadline:
                            print(f"budget of {args.budget_s} s spent: stopping", flush=True)
                            table.write_text("\n".join(lines) + "\n")
                            return 0
                        where = out / f"x{n}" / f"{kind}-{policy}-c{k}-s{s}"
                        where.mkdir(parents=True, exist_ok=True)
                        got = route_through(kind, cfg, fleet, stream, where, warm, k)
                        lines.append(line(kind, policy, n, k, got))
                        print(lines[-1], flush=True)
                        table.write_text("\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/fleet_twin_scores.py", description=__doc__)
    parser.add_argument("--workers", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--starts", type=int, default=2, help="router starts per line")
    parser.add_argument("--cases", nargs="+", default=DEFAULT_CASES, help="router:policy")
    parser.add_argument("--budget-s", type=float, default=1800.0)
    parser.add_argument("--out", default="results/fleet-twin-scores")
    args = parser.parse_args(argv)
    try:
        if any(not 2 <= n <= 8 for n in args.workers):
            raise BadInput(f"--workers must be integers in [2, 8], got {args.workers}")
        if any(not 1 <= k <= 16 for k in args.concurrency):
            raise BadInput(f"--concurrency must be integers in [1, 16], got {args.concurrency}")
        if not 1 <= args.starts <= 10:
            raise BadInput(f"--starts must be an integer in [1, 10], got {args.starts}")
        return run(args)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
