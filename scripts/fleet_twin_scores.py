"""The routing twin's score against the real routers at several fleet sizes and concurrencies
(docs/fleet.md §5): per case, one router start per repeat over built-in workers started once per
size (harness/routers/fleet.py `route_through`), a small stream that spreads over the workers,
and one table line per start: scored predicted / total, guesses, misses by cause, the split.
`cache_aware+spread` (either router) places one group per worker by a first wave sent through
the router at once, then sends the rest one at a time: its line scores those, and a second
table gives each start's placement wave apart (harness/routers/streams.py spread_stream).

    python scripts/fleet_twin_scores.py --workers 3 4 --concurrency 1 4 --starts 2 \
        --cases vllm:round_robin sglang:cache_aware --out results/fleet-twin-scores

Each start's folder (OUT/x<N>/<router>-<policy>-c<K>-s<start>/) keeps what a run of the pipeline
keeps under fleet/ (harness/routers/target.py): decisions.csv (each request's predicted and actual
worker, cached tokens, wave, whether the twin had learned what it needed, a miss's cause),
learned-<router>-<policy>.json (the worker order and first pick the twin learned) and the router's
log. The fixed streams here are the twin's checks; `python -m harness ... fleet.real=...` runs a
workload through a real router.

Bounded: stops starting routers once --budget-s has passed (the lines so far are kept), and every
process it starts is stopped by its PID (harness.routers.fleet.processes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.errors import BadInput  # noqa: E402
from harness.fleet.config import FleetConfig  # noqa: E402
from harness.fleet.policies import Routed  # noqa: E402
from harness.routers.drive import Decision, one_at_a_time, order_only  # noqa: E402
from harness.routers.fleet import (  # noqa: E402
    TWINNED,
    route_through,
    router_available,
    worker_fleet,
)
from harness.routers.streams import Waves, load_stream, spread_stream, streams  # noqa: E402
from harness.routers.target import write_decisions  # noqa: E402

LOAD_CASE = "kv_aware+load"  # kv_aware on a stream where in-flight load moves its decisions
# cache_aware on a stream whose one-at-a-time decisions spread: the groups placed through the
# router by a first wave sent at once, the rest one at a time (streams.py spread_stream)
SPREAD_CASE = "cache_aware+spread"
EXTRA_CASES = {LOAD_CASE: ("vllm",), SPREAD_CASE: ("sglang", "vllm")}  # policy: routers

DEFAULT_CASES = [
    "sglang:round_robin",
    "vllm:round_robin",
    "sglang:cache_aware",
    "vllm:cache_aware",
    "vllm:consistent_hash",
    "vllm:kv_aware",
    "vllm:kv_aware+load",
    f"sglang:{SPREAD_CASE}",
    f"vllm:{SPREAD_CASE}",
]
HEADER = (
    "| router | policy | workers | concurrency | scored predicted / total | guesses right / made "
    "| misses by cause | requests per worker |"
)
SPREAD_HEADER = (
    "| router | workers | start | one at a time: scored predicted / total | requests per worker "
    "| placement wave: predicted / total | its requests per worker |"
)


@dataclass(frozen=True)
class CaseStream:
    """What a case sends: the stream, the requests sent straight to a worker first, and the
    stream's own waves (None: waves of the line's concurrency)."""

    stream: list[Routed]
    warm: list[tuple[int, Routed]]
    waves: Waves | None = None


def parse_case(text: str) -> tuple[str, str]:
    kind, _, policy = text.partition(":")
    if policy not in TWINNED.get(kind, ()) and kind not in EXTRA_CASES.get(policy, ()):
        extra = [f"{k}:{p}" for p, ks in EXTRA_CASES.items() for k in ks]
        valid = ", ".join([*(f"{k}:{p}" for k, ps in TWINNED.items() for p in ps), *extra])
        raise BadInput(f"--cases {text!r} is not a router:policy the twin models; valid: {valid}")
    return kind, policy


def stream_size(policy: str, workers: int, concurrency: int) -> tuple[int, int]:
    """(groups, per group): enough groups that a spreading policy reaches every worker, and
    at least 24 requests, two waves of `concurrency` at the least."""
    groups = max(3, workers) if policy != "consistent_hash" else 3 * workers
    total = max(24, 2 * concurrency)
    return groups, max(2, -(-total // groups))


def case_stream(policy: str, workers: int, concurrency: int) -> CaseStream:
    """The stream of a case; `kv_aware+load`: waves of one group each, long and short prefixes
    placed (harness/routers/streams.py load_stream), where in-flight load moves decisions;
    `cache_aware+spread`: one group per worker placed by a wave through the router, then at
    least 24 requests one at a time."""
    if policy == LOAD_CASE:
        return CaseStream(*load_stream(workers, (256, 16, 256, 16, 16, 256), max(concurrency, 4)))
    if policy == SPREAD_CASE:
        stream, waves = spread_stream(workers, 1 + -(-24 // workers))
        return CaseStream(stream, [], waves)
    groups, per = stream_size(policy, workers, concurrency)
    return CaseStream(*streams(policy, groups, per, workers))


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
    guesses = [d for d in decisions if not d.learned]
    right = sum(d.predicted == d.actual for d in guesses)
    guessed = f"{right} / {len(guesses)}" if guesses else "0"
    return (
        f"| {kind}-router | {policy} | {n} | {k} | {hits(scored)} "
        f"| {guessed} | {causes(decisions)} | {share(decisions, n)} |"
    )


def spread_line(kind: str, n: int, start: int, decisions: Sequence[Decision]) -> str:
    """A spreading stream's line: its one-at-a-time decisions scored, the placement wave's
    apart (the twin then takes the wave's actual decisions: teacher forcing)."""
    alone = one_at_a_time(decisions)
    placement = [d for d in decisions if d not in alone]
    scored = [d for d in alone if d.learned]
    return (
        f"| {kind}-router | {n} | {start} | {hits(scored)} | {share(alone, n)} "
        f"| {hits(placement)} | {share(placement, n)} |"
    )


def hits(decisions: Sequence[Decision]) -> str:
    return f"{sum(d.predicted == d.actual for d in decisions)} / {len(decisions)}"


def share(decisions: Sequence[Decision], n: int) -> str:
    """The requests each worker took, worker 0 first (a worker that took none: 0)."""
    split = Counter(d.actual for d in decisions)
    return "/".join(str(split.get(i, 0)) for i in range(n))


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
    spread = [SPREAD_HEADER, "|" + "---|" * 7]

    def write() -> None:
        table.write_text("\n".join(lines + ([""] + spread if len(spread) > 2 else [])) + "\n")

    deadline = time.monotonic() + args.budget_s
    for n in args.workers:
        with worker_fleet(n, out / f"x{n}") as fleet:
            for kind, policy in cases:
                for k in args.concurrency:
                    if policy == SPREAD_CASE and k != 1:
                        print(f"{SPREAD_CASE} is one at a time after its placement wave: "
                              f"concurrency {k} skipped", flush=True)  # fmt: skip
                        continue
                    case = case_stream(policy, n, k)
                    cfg = FleetConfig(replicas=n, router=policy.partition("+")[0])
                    for s in range(args.starts):
                        if time.monotonic() > deadline:
                            print(f"budget of {args.budget_s} s spent: stopping", flush=True)
                            write()
                            return 0
                        where = out / f"x{n}" / f"{kind}-{policy}-c{k}-s{s}"
                        where.mkdir(parents=True, exist_ok=True)
                        got = route_through(
                            kind, cfg, fleet, case.stream, where, case.warm, k, case.waves
                        )
                        write_decisions(where / "decisions.csv", got)
                        if policy == SPREAD_CASE:
                            lines.append(line(kind, policy, n, k, one_at_a_time(got)))
                            spread.append(spread_line(kind, n, s, got))
                            print(spread[-1], flush=True)
                        else:
                            lines.append(line(kind, policy, n, k, got))
                        print(lines[-1], flush=True)
                        write()
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
