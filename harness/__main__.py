"""`python -m harness workload=<name> engine=<apc|radix> [model=...] [seed=...]`: one benchmark run.

Exit codes: 0 ok; 2 bad input (one `error: ` line on stderr, no traceback; the run directory, if
Hydra made one, holds a summary whose status is `failed`); 1 a failed run (a leak check, a crash);
130 SIGINT/SIGTERM, after writing the rows finished so far with status `interrupted`. A sweep
(`-m`) records a bad job as failed, runs the others, and exits with the worst job's code.
The last stdout line of a successful run is summary.json's content.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.config import RunConfig  # noqa: F401  (registers the schemas)
from harness.errors import BAD_INPUT, check_run_config, describe, preflight
from harness.results import RunDir, write_failed_summary
from harness.runner import RunInterrupted, run
from workloads.progress import progress

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
_sweep_codes: list[int] = []  # one exit code per finished sweep job
_sweep_bar: list = []  # the sweep's job counter, made by its first job (a terminal only)


def _on_signal(signum, frame):
    # SIGINT too: a shell may start us with SIGINT ignored, and one exception type is simpler.
    raise RunInterrupted(signal.Signals(signum).name)


def execute(dcfg: DictConfig, run_dir: Path, multirun: bool = False) -> int:
    """Run one job, report its outcome on stderr, and return its exit code."""
    _quiet_library_progress()
    try:
        cfg = OmegaConf.to_object(dcfg)
        check_run_config(cfg)
        resolved = OmegaConf.to_container(dcfg, resolve=True)
        outcome = run(cfg, run_dir, resolved)
    except (KeyboardInterrupt, RunInterrupted) as exc:  # before or after the measured window
        message = _write_interrupted_summary(run_dir, exc)
        print(f"error: {_job(run_dir, multirun)}{message}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BAD_INPUT as exc:
        message = describe(exc)
        write_failed_summary(run_dir, message)
        print(f"error: {_job(run_dir, multirun)}{message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # a crash: record it, show where, fail loudly
        write_failed_summary(run_dir, f"{type(exc).__name__}: {exc}")
        if not multirun:
            traceback.print_exc()
        print(f"error: {_job(run_dir, multirun)}{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(outcome.summary))
    status = outcome.summary.get("status")
    if status == "interrupted":
        print(f"error: {outcome.summary.get('error')}; finished rows were written", file=sys.stderr)
        return EXIT_INTERRUPTED
    if status != "ok":
        print(
            f"error: {_job(run_dir, multirun)}run {status}: {outcome.summary.get('error')}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def _quiet_library_progress() -> None:
    """datasets' "Generating train split" bars would add stderr lines around an `error: ` line."""
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # read when datasets imports
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()


def _job(run_dir: Path, multirun: bool) -> str:
    return f"job {run_dir.name}: " if multirun else ""


def _write_interrupted_summary(run_dir: Path, exc: BaseException) -> str:
    """An interrupt outside the measured window (set-up, warm-up, writing): no rows are kept."""
    message = f"{exc or 'SIGINT'} outside the measured run; no request rows were kept"
    date = time.strftime("%Y%m%d-%H%M%S")
    RunDir(run_dir).write_summary(
        {"status": "interrupted", "error": message, "date": date, "completed": 0}
    )
    return message


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(dcfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    code = execute(dcfg, run_dir, multirun)
    if not multirun:
        sys.exit(code)
    _sweep_codes.append(code)
    if not _sweep_bar:
        _sweep_bar.append(progress(None, "sweep jobs done", "job"))
    _sweep_bar[0].update(1)
    if code == EXIT_INTERRUPTED:  # stop the sweep: the user asked to
        sys.exit(code)


def _sweep_exit_code(codes: list[int]) -> int:
    """The worst job's code: interrupted > bad input > failed > ok."""
    rank = [EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED]
    return max(codes, key=rank.index, default=EXIT_OK)


if __name__ == "__main__":
    problem = preflight(sys.argv[1:])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    main()
    code = _sweep_exit_code(_sweep_codes)
    if code != EXIT_OK:
        num_failed = sum(c != EXIT_OK for c in _sweep_codes)
        print(f"error: {num_failed} of {len(_sweep_codes)} jobs did not finish ok", file=sys.stderr)
    sys.exit(code)
