"""The report's printed summary: run counts, the files written, and each table's headline line
(0%-hit on/off ratios with their interval or, from too few pairs, a caveat; projected overheads;
the hit-rate decomposition; fleet rows)."""

from __future__ import annotations

import pandas as pd

from harness.metrics.format import counted
from harness.report.build import FIGURE_DIR, Report
from harness.report.decomposition import CACHE_A, CACHE_B
from harness.report.stats import MIN_INTERVAL_N


def describe(report: Report) -> str:
    """A short human summary: counts, files, and the overhead ratios."""
    runs = report.runs
    n_ok = int(runs["ok"].sum()) if not runs.empty else 0
    incomplete = runs[runs["status"] == "incomplete"] if not runs.empty else runs
    num_other = len(runs) - n_ok - len(incomplete)
    lines = [
        f"{len(runs)} runs ({n_ok} ok, {len(incomplete)} incomplete, {num_other} failed or "
        f"interrupted) below {report.root}"
    ]
    lines += [
        f"incomplete: {row['run_dir']} ({int(row['completed'])} finished rows, no summary: killed?)"
        for _, row in incomplete.iterrows()
    ]
    if report.out_dir is not None:
        lines.append(
            f"wrote {report.out_dir / 'summary.csv'} and {len(report.figures)} figures in "
            f"{report.out_dir / FIGURE_DIR}"
        )
    tput = report.overhead[
        report.overhead.get("metric", pd.Series(dtype=str)) == "total_token_throughput"
    ]
    lines += [_ratio_line(row) for _, row in tput.iterrows()]
    for _, row in report.projected.iterrows():
        lines.append(
            f"projected 0%-hit overhead {row['engine']} on {row['hardware']}: "
            f"{row['overhead_share'] * 100:.3f}% of {row['duration_s']:.2f} s "
            f"({counted(int(row['n_runs']), 'run')})"
        )
    for _, row in report.decomposition[
        report.decomposition.get("metric", pd.Series(dtype=str)) == "hit_rate"
    ].iterrows():
        why = "no arm differs" if row["driver"] == "none" else f"driven by the {row['driver']}"
        lines.append(
            f"{row['workload']}: {CACHE_A} vs {CACHE_B} hit rate differ by "
            f"{row['shipped_difference']:+.3f}, {why}"
        )
    for _, row in report.fleet.iterrows():
        lines.append(
            f"fleet {row['workload']} x{row['replicas']} {row['engine']} {row['router']} "
            f"({row['load_mode']}, rate {row['rate']}, concurrency {row['concurrency']}): hit rate "
            f"{row['fleet_hit_rate']:.4f} (bound {row['fleet_bound']:.4f}, router loss "
            f"{row['router_loss']:.4f}), "
            f"p90 TTFT {row['p90_ttft_ms']:.1f} ms, imbalance {row['load_imbalance']:.2f}"
        )
    return "\n".join(lines)


def _ratio_line(row: pd.Series) -> str:
    """One on/off throughput ratio; below MIN_INTERVAL_N pairs it says it is no measurement (one
    smoke pair on the tiny model gave 0.62, read as a 38% overhead)."""
    n = int(row["n_pairs"])
    ci = "" if pd.isna(row["ci_low"]) else f", 95% CI [{row['ci_low']:.4f}, {row['ci_high']:.4f}]"
    line = (
        f"0%-hit throughput ratio {row['engine']} on/off: {row['ratio']:.4f}{ci} "
        f"({row['workload']}, {row['model']}, {counted(n, 'pair')})"
    )
    if n < MIN_INTERVAL_N:
        line += (
            f"; too few pairs to read as an overhead (no interval below {MIN_INTERVAL_N}; "
            "python -m harness -m +suite=overhead 'seed=range(0,20)' measures it, "
            "docs/benchmarking.md §6)"
        )
    return line
