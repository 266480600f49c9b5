"""`python -m harness.report [RESULTS_DIR] [--out DIR]`: every comparison figure and summary.csv.

Loads every run below RESULTS_DIR (default results/) with `harness.results.load.load_runs`, writes
`RESULTS_DIR/summary.csv` (one row per configuration, runs counted by status), `overhead.csv` (the
0%-hit on/off ratios with their 95% t-intervals), `projected_overhead.csv` (simulated 0%-hit
bookkeeping / duration per hardware preset), `fleet.csv` (fleet runs by router and design,
harness/report/fleet_table.py), `tiers.csv` (per run of a host-tier sweep, the hits per tier and
the host link's load, harness/report/tier_table.py), `decomposition.csv` (the scheduler x cache
effects per platform and workload, harness/report/decomposition.py) and `RESULTS_DIR/figures/*.png|svg`.
Runs whose status is not `ok` are counted, never plotted; runs killed before writing a summary
are listed as `incomplete` with their row counts; a figure whose runs are absent is skipped with
one log line, so a partial results tree always gives a report.

Where it writes: `--out DIR` when given; otherwise RESULTS_DIR itself, but only when RESULTS_DIR
holds runs (a folder of CSVs without runs, such as results/reference, is refused: the report
never writes into a folder it was not pointed at to write). A table with no rows never replaces
a non-empty file. From Python, `build_report(root)` only reads: pass `out_dir` to write the tables
and figures. Only the command line selects matplotlib's
Agg backend; importing this module leaves a notebook's or a script's backend alone.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pandas as pd

from harness.config.errors import BAD_INPUT
from harness.report.decomposition import decomposition_table
from harness.report.fleet_table import fleet_table
from harness.report.plots import Inputs, Skip
from harness.report.registry import FIGURES
from harness.report.signals import Terminated, signals_raise
from harness.report.tables import (
    overhead_pairs,
    overhead_table,
    projected_overhead_table,
    summary_table,
    tidy_runs,
)
from harness.report.tier_table import tier_table
from harness.results.load import load_runs
from harness.results.safe_write import SafeRoot, UnsafePath
from harness.results.stale_temps import remove_stale_temps
from workloads.progress import progress

log = logging.getLogger("harness.report")
FIGURE_DIR = "figures"
WRITTEN = "written.txt"  # in FIGURE_DIR: the figure files the last report wrote, one a line


@dataclass
class Report:
    root: Path
    runs: pd.DataFrame  # tidy runs, every status
    requests: pd.DataFrame
    summary: pd.DataFrame
    overhead: pd.DataFrame
    projected: pd.DataFrame = field(default_factory=pd.DataFrame)  # projected_overhead.csv
    decomposition: pd.DataFrame = field(default_factory=pd.DataFrame)  # decomposition.csv
    fleet: pd.DataFrame = field(default_factory=pd.DataFrame)  # fleet.csv
    tiers: pd.DataFrame = field(default_factory=pd.DataFrame)  # tiers.csv
    figures: list[str] = field(default_factory=list)  # stems written under out_dir/figures
    skipped: dict[str, str] = field(default_factory=dict)  # figure -> reason
    out_dir: Path | None = None  # where the CSVs and figures were written; None: nowhere
    drawn: dict = field(default_factory=dict)  # stem -> open Figure, with keep_figures only


def load(root: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(tidy runs, requests) below root; the `figures/` folder and unreadable runs are ignored."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runs, requests = load_runs(root)
    for w in caught:
        log.warning("%s", w.message)
    return tidy_runs(runs), requests


def build_report(
    root: str | Path,
    figures: bool = True,
    out_dir: str | Path | None = None,
    keep_figures: bool = False,
) -> Report:
    """The report of the runs below `root` (relative paths: the current directory). Nothing is
    written unless `out_dir` is given: then summary.csv, overhead.csv, projected_overhead.csv and,
    with `figures`, figures/ go there (replacing the figures the last report wrote there, listed
    in figures/written.txt). `keep_figures` leaves the drawn matplotlib Figures open in
    `Report.drawn` (stem -> Figure) for inspection; the caller closes them."""
    root = Path(root)
    runs, requests = load(root)
    summary = summary_table(runs)
    pairs = overhead_pairs(runs)
    report = Report(
        root, runs, requests, summary, overhead_table(pairs), projected_overhead_table(runs)
    )
    report.decomposition = decomposition_table(runs)
    report.fleet = fleet_table(runs)
    report.tiers = tier_table(runs)
    if out_dir is None:
        return report
    report.out_dir = Path(out_dir)
    safe = SafeRoot(report.out_dir)  # never through a planted link, never outside out_dir
    safe.mkdir()
    for folder in (report.out_dir, report.out_dir / FIGURE_DIR):
        if stale := remove_stale_temps(folder):  # a report killed by SIGKILL left them
            log.info("removed %d temporary files a killed report left in %s", len(stale), folder)
    tables = {"summary.csv": summary, "overhead.csv": report.overhead}
    tables["projected_overhead.csv"] = report.projected
    if not report.decomposition.empty:
        tables["decomposition.csv"] = report.decomposition
    if not report.fleet.empty:
        tables["fleet.csv"] = report.fleet
    if not report.tiers.empty:
        tables["tiers.csv"] = report.tiers
    for name, table in tables.items():
        if table.empty and _has_content(report.out_dir / name):
            log.info("kept %s: this report has no rows for it", report.out_dir / name)
            continue

        def write(f: IO[str], t: pd.DataFrame = table) -> None:
            t.to_csv(f, index=False)

        safe.write_atomic(report.out_dir / name, write)
    if figures:
        _figures(report, pairs, report.drawn if keep_figures else None)
    return report


def _has_content(path: Path) -> bool:
    """A regular file with at least one byte (a link or a folder there is SafeRoot's to refuse)."""
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_size > 0
    except OSError:
        return False


def _figures(report: Report, pairs: pd.DataFrame, keep: dict | None) -> None:
    if report.out_dir is None:  # build_report draws figures only where it writes
        raise ValueError("figures need the report's out_dir")
    ok = report.runs[report.runs["ok"]] if not report.runs.empty else report.runs
    if "run_id" in report.requests and not ok.empty:
        requests = report.requests[report.requests["run_id"].isin(ok["run_id"])]
    else:
        requests = pd.DataFrame()
    folder = report.out_dir / FIGURE_DIR
    remove_written(folder)
    inputs = Inputs(ok, requests, pairs, folder, keep)
    for name, make in progress(list(FIGURES.items()), "report figures", "fig"):
        if ok.empty:
            report.skipped[name] = "no run with status ok"
        else:
            try:
                report.figures.extend(make(inputs))
            except Skip as exc:
                report.skipped[name] = str(exc)
        if name in report.skipped:
            log.info("skipped figure %s: %s", name, report.skipped[name])
    write_list(folder, report.figures)
    ours = {f"{stem}.{suffix}" for stem in report.figures for suffix in ("png", "svg")}
    others = sorted(
        p.name for p in folder.glob("*") if p.suffix in (".png", ".svg") and p.name not in ours
    )
    if others:  # written by hand, by an older report without a list, or by the claims
        log.info("figures not written by this report (left as they are): %s", ", ".join(others))


def remove_written(folder: Path) -> None:
    """Delete the figure files the previous report listed in its WRITTEN file, and nothing else:
    a report rewrites its figures as a whole, so no stale figure outlives a changed results tree,
    while files that others put there (the claims' figures, say) stay."""
    from workloads.readers import read_text

    listing = folder / WRITTEN
    if not listing.is_file():
        return
    safe = SafeRoot(folder)  # a link (the folder, the listing, a listed name) is left alone
    try:
        names = read_text(listing, "figure list", 2**20).split()
    except BAD_INPUT:  # not ours as written: delete nothing
        return
    for name in names:
        path = folder / name
        if path.parent == folder and path.suffix in (".png", ".svg"):  # never outside the folder
            with contextlib.suppress(UnsafePath):
                safe.remove(path)
    with contextlib.suppress(UnsafePath):
        safe.remove(listing)


def write_list(folder: Path, stems: list[str]) -> None:
    if not stems:
        return
    names = [f"{stem}.{suffix}" for stem in sorted(stems) for suffix in ("png", "svg")]
    SafeRoot(folder).put_text(folder / WRITTEN, "\n".join(names) + "\n")


def holds_runs(root: Path) -> bool:
    """True when a run's summary or rows file lies below `root` (what load_runs would find)."""
    from harness.results.run_dir import RunDir

    names = (RunDir.SUMMARY, RunDir.ROWS)
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != FIGURE_DIR and not d.startswith(".")]
        if any(name in files for name in names):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.report", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "results_dir", nargs="?", default="results", help="folder holding run directories"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="folder to write the CSVs and figures/ into (default: RESULTS_DIR, when it holds runs)",
    )
    parser.add_argument(
        "--export",
        metavar="FORMAT",
        default=None,
        help="instead of the report, export every finished run (harness/export: br0.2, "
        "mooncake, bailian) into --out (default: RESULTS_DIR/export)",
    )
    parser.add_argument(
        "--import",
        dest="import_",
        nargs=2,
        metavar=("CLIENT", "PATH"),
        default=None,
        help="instead of the report, write a client's per-request output (aiperf, guidellm, "
        "inference-perf, vllm-bench, sglang-bench) as a run folder: --out, default "
        "RESULTS_DIR/imported/CLIENT-<name of PATH>",
    )
    parser.add_argument(
        "--server-log",
        metavar="FILE",
        default=None,
        help="with --import: join the client's rows by request id to the built-in server's "
        "request log (its request_log=FILE), adding the server's cached tokens",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = Path(args.results_dir)
    if args.import_ is not None:
        from harness.export.import_run import import_main

        client, source = args.import_[0], Path(args.import_[1])
        return import_main(
            client,
            source,
            Path(args.out or root / "imported" / f"{client}-{source.stem}"),
            Path(args.server_log) if args.server_log else None,
        )
    if not root.is_dir():
        print(f"error: results directory {root} does not exist", file=sys.stderr)
        return 2
    if args.export is not None:
        from harness.export.cli import export_tree_main

        return export_tree_main(root, args.export, Path(args.out or root / "export"))
    out = Path(args.out) if args.out else root
    if args.out is None and not holds_runs(root):
        print(
            f"error: {root} holds no run directories; nothing was written (pass --out DIR to "
            "write the report of no runs elsewhere)",
            file=sys.stderr,
        )
        return 2
    import matplotlib

    matplotlib.use("Agg")  # the command line draws to files only, with or without a display
    try:
        with signals_raise():  # a SIGTERM mid-write removes the temporary file as it leaves
            report = build_report(root, out_dir=out)
    except (Terminated, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        print(
            f"interrupted ({signal.Signals(signum).name}): the report in {out} is incomplete; "
            "no temporary file was left",
            file=sys.stderr,
        )
        return 128 + signum
    except BAD_INPUT + (OSError,) as exc:  # a planted link, a read-only or full results folder
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        print(f"error: cannot write the report into {out}: {what}{where}", file=sys.stderr)
        return 2
    from harness.report.describe import describe  # the report's printed lines

    print(describe(report))
    return 0
