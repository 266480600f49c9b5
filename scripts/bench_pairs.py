"""Interleaved benchmark rounds and paired ratios, shared by bench_cache.py and bench_radix_tree.py.

Every round samples every case once, in alternating order (forward, then reversed: A B, B A), so
load that drifts during a run reaches all arms alike; a ratio is formed inside each round and
reported as min and median over rounds. `--baseline DIR` runs the same script on another checkout
(e.g. `git worktree add /tmp/before main`) in a second long-lived process and alternates rounds
between the two, so before/after ratios are measured side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Case = Callable[[], float]  # one sample: per-call (or per-unit) nanoseconds of one batch


def select(factories: dict[str, Callable[[], Case]], patterns: str) -> dict[str, Case]:
    """Set up the cases whose names contain one of the comma-separated patterns (all if empty)."""
    wanted = [p for p in patterns.split(",") if p]
    chosen = [k for k in factories if not wanted or any(p in k for p in wanted)]
    if not chosen:
        raise SystemExit(f"error: --cases {patterns!r} matches none of: {', '.join(factories)}")
    return {k: factories[k]() for k in chosen}


def one_round(cases: dict[str, Case], reverse: bool) -> dict[str, float]:
    names = list(cases)[::-1] if reverse else list(cases)
    return {name: cases[name]() for name in names}


def rounds_in_process(cases: dict[str, Case], num_rounds: int) -> list[dict[str, float]]:
    return [one_round(cases, reverse=r % 2 == 1) for r in range(num_rounds)]


def stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "n": len(values)}


def paired(num: list[float], den: list[float]) -> dict[str, float]:
    """Min and median over rounds of num[i] / den[i] (pairs taken in the same round)."""
    return stats([a / b for a, b in zip(num, den)])


class Child:
    """This script serving rounds from another checkout: one JSON line per `round` request."""

    def __init__(self, script: Path, root: Path, args: list[str]) -> None:
        cmd = [sys.executable, str(script), "--serve", "--root", str(root), *args]
        self.where = f"{script.name} on {root}"
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are PIPEs
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = self.stdout.readline()
        if not ready.startswith("ready"):
            raise SystemExit(f"error: {self.where} did not start (its stderr is above)")

    def round(self, reverse: bool) -> dict[str, float]:
        self.stdin.write("reverse\n" if reverse else "forward\n")
        self.stdin.flush()
        line = self.stdout.readline()
        if not line:
            raise SystemExit(f"error: {self.where} stopped during a round (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=60)


def serve(cases: dict[str, Case]) -> None:
    """The child side of `Child`: set-up is done; answer rounds until stdin closes."""
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(one_round(cases, reverse=line.strip() == "reverse")), flush=True)


def rounds_against(
    script: Path, baseline: Path, here: Path, args: list[str], num_rounds: int
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Alternate rounds between `baseline` and `here` (B A, A B, ...): (before, after) samples."""
    before, after = Child(script, baseline, args), Child(script, here, args)
    b_rounds, a_rounds = [], []
    try:
        for r in range(num_rounds):
            reverse = r % 2 == 1
            first, second = (after, before) if reverse else (before, after)
            x = first.round(reverse)
            y = second.round(reverse)
            b_rounds.append(x if first is before else y)
            a_rounds.append(y if first is before else x)
    finally:
        before.close()
        after.close()
    return b_rounds, a_rounds


def positive_int(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def add_common_args(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--rounds", type=positive_int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="another checkout to compare against"
    )
    parser.add_argument(
        "--cases", default="", help="comma-separated substrings: run only the cases matching one"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # Child's side
    parser.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)  # its checkout


def use_root(argv: list[str]) -> None:
    """Import the engines from `--root DIR` when given (must run before importing them)."""
    root = Path(__file__).resolve().parents[1]
    for flag in ("--root", "--baseline"):
        if flag in argv[:-1]:
            checkout = Path(argv[argv.index(flag) + 1]).resolve()
            if not (checkout / "engines" / "__init__.py").is_file():
                message = f"error: {flag} {checkout} is not a checkout (no engines/ package)"
                print(message, file=sys.stderr)
                raise SystemExit(2)
            if flag == "--root":
                root = checkout
    sys.path.insert(0, str(root))


def fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def table(rows: list[dict], cols: tuple[str, ...]) -> str:
    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
