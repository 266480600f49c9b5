"""`python -m harness workload=<name> engine=<apc|radix> [model=...] [seed=...]`: one benchmark run.

Bad input (an unknown name, a value out of range, a missing file) ends with one line on stderr and
exit code 2; the run directory, if Hydra made one, then holds a summary whose status is `failed`.
SIGINT/SIGTERM during a run keep the finished rows with status `interrupted` (exit 130).
The last stdout line of a successful run is summary.json's content.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.config import RunConfig  # noqa: F401  (registers the schemas)
from harness.errors import BAD_INPUT, describe, preflight
from harness.results import write_failed_summary
from harness.runner import RunInterrupted, run


def _on_sigterm(signum, frame):
    raise RunInterrupted()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(dcfg: DictConfig) -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        cfg = OmegaConf.to_object(dcfg)
        resolved = OmegaConf.to_container(dcfg, resolve=True)
        outcome = run(cfg, run_dir, resolved)
    except BAD_INPUT as exc:
        message = describe(exc)
        write_failed_summary(run_dir, message)
        print(f"error: {message}", file=sys.stderr)
        if multirun:  # one bad job must not end the sweep (benchmarking.md §13, pitfall 5)
            return
        sys.exit(2)
    except Exception as exc:  # a crash: record it for the sweep, then fail loudly
        write_failed_summary(run_dir, f"{type(exc).__name__}: {exc}")
        if multirun:
            print(f"error: job {run_dir.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return
        raise
    print(json.dumps(outcome.summary))
    status = outcome.summary.get("status")
    if status == "interrupted" and not multirun:
        sys.exit(130)
    if status != "ok" and not multirun:
        sys.exit(1)


if __name__ == "__main__":
    problem = preflight(sys.argv[1:])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()
