"""One job from a composed configuration to an exit code: claim the directory, check, run, report.

Exit codes: 0 ok; 2 bad input (one `error: ` line on stderr, no traceback); 1 a failed run (a leak
check, a crash: its traceback is printed and its finished rows are kept; a full disk or a target's
process that failed, harness/run/faults.py: one line); 130 SIGINT/SIGTERM, with
the rows finished so far kept and status `interrupted`, whenever it arrives. The run directory,
once claimed, always ends with a summary.json whose status says which; a directory holding
another run's results is never written (harness.results.identity.claim_run_dir).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.config.errors import BAD_INPUT, config_errors, describe
from harness.results.identity import discard_run_dir
from harness.results.rowlog import RowLog, count_rows, rows_table
from harness.results.run_dir import RunDir
from harness.run.compose import start, typed, with_values_checked, write_manifest
from harness.run.faults import outside_fault
from harness.run.pipeline import RunInterrupted, run
from harness.run.target import Target
from harness.run.targets import target_for

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
log = logging.getLogger("harness")


def execute(
    dcfg: DictConfig, run_dir: Path, multirun: bool = False, target: Target[Any] | None = None
) -> int:
    """Run one job, report its outcome on stderr, and return its exit code. `target`: the one
    to measure instead of a fresh one of the kind the config selects (a caller that holds
    running servers for several runs: harness/routers/target.py `RealFleetTarget(workers)`)."""
    _quiet_library_progress()
    job = f"job {Path(run_dir).name}: " if multirun else ""
    try:
        cfg = typed(dcfg)
        out, rows = start(Path(run_dir), bool(cfg.overwrite))
    except (KeyboardInterrupt, RunInterrupted) as exc:  # nothing of ours is in the directory yet
        return _say(f"{job}{exc or 'SIGINT'} during start-up; nothing was run", EXIT_INTERRUPTED)
    except config_errors() as exc:
        return _say(f"{job}{describe(exc)}", EXIT_BAD_INPUT)
    try:
        write_manifest(out, with_values_checked(dcfg, cfg))
        outcome = run(cfg, out, rows, target or target_for(cfg))
    except (KeyboardInterrupt, RunInterrupted) as exc:  # start-up, warm-up or writing
        kept = _close(out, rows, "interrupted", f"{exc or 'SIGINT'} outside the measured run")
        return _say(
            f"{job}{exc or 'SIGINT'} outside the measured run; {kept} finished rows were written",
            EXIT_INTERRUPTED,
        )
    except BAD_INPUT as exc:
        _refused(out, rows, describe(exc), multirun)
        return _say(f"{job}{describe(exc)}", EXIT_BAD_INPUT)
    except Exception as exc:  # a crash: keep the rows, record it, show where, fail loudly
        message = f"{type(exc).__name__}: {exc}"
        _close(out, rows, "failed", message)
        if not outside_fault(exc):  # a full disk, a target's process failing: not a bug, one line
            traceback.print_exc()
        return _say(f"{job}{message}", EXIT_FAILED)
    return _outcome(outcome.summary, out.path, job)


def _outcome(summary: dict, run_dir: Path, job: str) -> int:
    status = summary.get("status")
    print(f"run directory: {run_dir}", file=sys.stderr)  # the last stderr line before the JSON
    print(json.dumps(summary))
    if status == "interrupted":
        return _say(f"{job}{summary.get('error')}; finished rows were written", EXIT_INTERRUPTED)
    if status != "ok":
        return _say(f"{job}run {status}: {summary.get('error')}", EXIT_FAILED)
    return EXIT_OK


def _say(line: str, code: int) -> int:
    print(f"error: {line}", file=sys.stderr)
    _to_log_files(f"error: {line}")
    return code


def _to_log_files(line: str) -> None:
    """The outcome into harness.log too (Hydra's file handler); stderr has it already, once."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, line, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def _refused(out: RunDir, rows: RowLog, error: str, multirun: bool) -> None:
    """Bad input found after the directory was claimed (a request larger than the KV pool, an
    unreachable or badly answering server). A single run leaves no run folder: nothing was
    measured, and a failed folder would be counted by every later report. A sweep's job keeps
    its folder with a failed summary: the sweep's record of that job."""
    rows.close()
    if multirun or count_rows(out.rows_path):  # rows were measured: keep them, recorded
        _close(out, rows, "failed", error)
    else:
        discard_run_dir(out.path)


def _close(out: RunDir, rows: RowLog, status: str, error: str) -> int:
    """End a run that did not finish: its rows become requests.parquet (if that fails, even on
    rows holding values of the wrong type, the rows file stays for the report to count); the
    summary is always written. Returns how many rows were kept. Never raises, but for a summary
    that cannot be written (a full disk: the report lists the run as incomplete)."""
    rows.close()
    completed = 0
    try:
        completed = count_rows(out.rows_path)
        table = rows_table(out.rows_path) if completed else None
        if table is not None:
            out.write_requests(table)
        out.remove(out.rows_path)
    except Exception as exc:  # the rows stay as they are; the summary says why
        error = f"{error}; its rows were kept as {out.ROWS} ({type(exc).__name__}: {exc})"[:2000]
    date = time.strftime("%Y%m%d-%H%M%S")
    with contextlib.suppress(OSError):
        out.write_summary({"status": status, "error": error, "date": date, "completed": completed})
    return completed


def _quiet_library_progress() -> None:
    """datasets' "Generating train split" bars would add stderr lines around an `error: ` line."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # read when datasets imports
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def sweep_exit_code(codes: list[int]) -> int:
    """The worst job's code: interrupted > bad input > failed > ok."""
    rank = [EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED]
    return max(codes, key=rank.index, default=EXIT_OK)
