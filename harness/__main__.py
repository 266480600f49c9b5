"""`python -m harness workload=<name> engine=<apc|radix> [model=...] [seed=...]`: one benchmark run.

Exit codes (harness.run.execute): 0 ok; 2 bad input (one `error: ` line on stderr, no traceback);
1 a failed run; 130 SIGINT/SIGTERM, at any point from start-up on. A sweep (`-m`) records a bad
job as failed, runs the others, and exits with the worst job's code. The last stderr line of a
finished run names its directory; the last stdout line is summary.json's content.
"""

from __future__ import annotations

import gc
import signal
import sys

EXIT_INTERRUPTED = 130
_sweep_codes: list[int] = []  # one exit code per finished sweep job
_sweep_bar: list = []  # the sweep's job counter, made by its first job (a terminal only)


def _on_signal(signum, frame):
    # SIGINT too: a shell may start us with SIGINT ignored, and one exception type is simpler.
    from harness.run.pipeline import RunInterrupted

    raise RunInterrupted(signal.Signals(signum).name)


def _cli() -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from harness.config.preflight import preflight
    from harness.config.schema import CONF_DIR
    from harness.config.startup_signals import raise_held
    from harness.results.identity import claim_before_hydra
    from harness.run.execute import EXIT_OK, execute, sweep_exit_code
    from workloads.progress import progress

    problem = preflight(sys.argv[1:])
    raise_held()  # before the run directory is claimed: an interrupted start leaves nothing
    problem = problem or claim_before_hydra(sys.argv[1:])
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    raise_held()  # one that arrived before the run's handlers took over

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def main(dcfg) -> None:
        from pathlib import Path

        run_dir = Path(HydraConfig.get().runtime.output_dir)
        multirun = HydraConfig.get().mode == RunMode.MULTIRUN
        code = execute(dcfg, run_dir, multirun)
        _sweep_codes.append(code)
        if multirun:
            if not _sweep_bar:
                _sweep_bar.append(progress(None, "sweep jobs done", "job"))
            _sweep_bar[0].update(1)
        if not multirun or code == EXIT_INTERRUPTED:  # a sweep stops when the user asks it to
            sys.exit(code)

    main()
    code = sweep_exit_code(_sweep_codes)
    if code != EXIT_OK:
        num_failed = sum(c != EXIT_OK for c in _sweep_codes)
        print(f"error: {num_failed} of {len(_sweep_codes)} jobs did not finish ok", file=sys.stderr)
    return code


if __name__ == "__main__":
    # Handlers first: the imports and the preflight take seconds, and an interrupt there must end
    # as cleanly as one during the run.
    try:
        from harness.config.startup_signals import hold_startup_signals

        hold_startup_signals()
        sys.exit(_cli())
    except KeyboardInterrupt as exc:
        print(f"error: {exc or 'SIGINT'} during start-up; nothing was run", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The process ends here. The interpreter's last garbage collection would walk every
        # object the run left (a whole-trace replay's requests and engine: ~0.2 s) only to free
        # memory the OS takes back anyway. The results are written and their files closed by
        # now (harness.results writes each through a closed temporary file), and logging's
        # exit handler still flushes the log files.
        gc.freeze()
