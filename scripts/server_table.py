"""Markdown table of live-server runs: measured vs twin-predicted cached tokens, and the bounds.

Usage: python scripts/server_table.py RUN_DIR [RUN_DIR ...]  (directories of `server=` runs)
One row per run: workload, load (one at a time or burst), requests, exact predictions, measured
and predicted cached tokens, the server's counter delta, and measured / predicted / ideal / LRU /
Belady hit rates (%). `--timeline` prints instead the twin's timeline per run: how it was placed
(step_locked / one_at_a_time / predicted), KV-event steps equal of the server's, engine steps and
preemptions server vs twin. docs/servers.md §1.5 holds its output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HEADER = (
    "| workload | sent | requests | exact | measured cached | predicted | counter delta "
    "| hit % measured | predicted | ideal | LRU | Belady |"
)


def pct(value) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def row(run_dir: Path) -> str:
    s = json.loads((run_dir / "summary.json").read_text())
    sent = "1 at a time" if s.get("one_at_a_time") else s.get("load_mode", "?")
    return (
        f"| {s['workload']} | {sent} | {s['twin_requests']} | {s['twin_matches']} "
        f"| {s['prompt_tokens_cached']:,} | {s['twin_predicted_tokens']:,} "
        f"| {s['server_hits_delta']:,} | {pct(s['hit_rate'])} | {pct(s['predicted_hit_rate'])} "
        f"| {pct(s['ideal_hit_rate'])} | {pct(s['theoretical_hit_rate_capped'])} "
        f"| {pct(s['belady_hit_rate'])} |"
    )


TIMELINE = (
    "| workload | sent | requests | exact | cached measured = counter | predicted | timeline "
    "| KV steps equal | steps server / twin | preemptions server / twin |"
)


def num(value) -> str:
    return "n/a" if value is None else f"{value:,}"


def timeline_row(run_dir: Path) -> str:
    s = json.loads((run_dir / "summary.json").read_text())
    sent = "1 at a time" if s.get("one_at_a_time") else s.get("load_mode", "?")
    kv = f"{num(s.get('twin_kv_steps_equal'))} / {num(s.get('twin_kv_server_steps'))}"
    return (
        f"| {s['workload']} | {sent} | {s['twin_requests']} | {s['twin_matches']} "
        f"| {s['prompt_tokens_cached']:,} = {num(s['server_hits_delta'])} "
        f"| {s['twin_predicted_tokens']:,} | {s.get('twin_timeline', 'n/a')} | {kv} "
        f"| {num(s.get('server_steps_delta'))} / {num(s.get('twin_steps'))} "
        f"| {num(s.get('server_preemptions_delta'))} / {num(s.get('twin_preemptions'))} |"
    )


def main(argv: list[str]) -> int:
    if not argv or argv == ["--timeline"]:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    if argv[0] == "--timeline":
        print(TIMELINE)
        print("|" + "---|" * (TIMELINE.count("|") - 1))
        for arg in argv[1:]:
            print(timeline_row(Path(arg)))
        return 0
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for arg in argv:
        print(row(Path(arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
