"""Markdown table of live-server runs: measured vs twin-predicted cached tokens, and the bounds.

Usage: python scripts/server_table.py RUN_DIR [RUN_DIR ...]  (directories of `server=` runs)
One row per run: workload, load (one at a time or burst), requests, exact predictions, measured
and predicted cached tokens, the server's counter delta, and measured / predicted / ideal / LRU /
Belady hit rates (%). docs/servers.md §1.5 holds its output.
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


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    print(HEADER)
    print("|" + "---|" * (HEADER.count("|") - 1))
    for arg in argv:
        print(row(Path(arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
