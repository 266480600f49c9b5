"""Run one pinned experiment suite (conf/suite/<name>.yaml), time it, then build its report.

    python scripts/run_suite.py overhead                 # = python -m harness +suite=overhead
    python scripts/run_suite.py main_smoke --out /tmp/x  # sweep into /tmp/x
    python scripts/run_suite.py trace -- hydra/launcher=joblib   # extra Hydra overrides after --

A suite is a Hydra multirun (the suite file sets hydra.mode=MULTIRUN and hydra.sweeper.params);
this wrapper only adds a known sweep dir, checks that `trace_sim` has its simulated executor,
writes `suite.json` (command, wall time, run counts) and runs harness.report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE_DIR = ROOT / "conf" / "suite"


def suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def simulated_available() -> bool:
    """True when conf/hardware exists and the `simulated` executor is registered."""
    if not (ROOT / "conf" / "hardware").is_dir():
        return False
    probe = "import engines.simulate, engines.build as b; import sys; sys.exit(0 if 'simulated' in b.EXECUTORS.names() else 1)"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True)
    return proc.returncode == 0


def command(name: str, sweep_dir: Path, extra: list[str]) -> list[str]:
    # -m although the suite sets hydra.mode: MULTIRUN, so the CLI's preflight (a single-run
    # compose) leaves comma sweeps given on the command line to the sweeper.
    return [
        sys.executable,
        "-m",
        "harness",
        "-m",
        f"+suite={name}",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help=f"suite name: {', '.join(suites())}")
    parser.add_argument(
        "--out", type=Path, default=None, help="sweep dir (default results/suite-<name>/<time>)"
    )
    parser.add_argument("--no-report", action="store_true", help="skip python -m harness.report")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    args = parser.parse_args(argv)
    if args.name not in suites():
        print(f"error: unknown suite {args.name!r}; valid: {', '.join(suites())}", file=sys.stderr)
        return 2
    if args.name.startswith("trace_sim") and not simulated_available():
        print(
            "error: suite trace_sim needs the simulated executor (engines/simulate, conf/hardware)",
            file=sys.stderr,
        )
        return 2
    sweep_dir = args.out or ROOT / "results" / f"suite-{args.name}" / time.strftime("%Y%m%d-%H%M%S")
    cmd = command(args.name, sweep_dir.resolve(), args.overrides)
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT)
    wall_s = time.perf_counter() - t0
    statuses = [json.loads(p.read_text()).get("status") for p in sweep_dir.rglob("summary.json")]
    record = {
        "suite": args.name,
        "command": cmd[1:],
        "returncode": proc.returncode,
        "wall_s": round(wall_s, 1),
        "num_runs": len(statuses),
        "num_ok": statuses.count("ok"),
    }
    if sweep_dir.is_dir():
        (sweep_dir / "suite.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))
    if not args.no_report and sweep_dir.is_dir():
        subprocess.run(
            [sys.executable, "-m", "harness.report", str(sweep_dir)], cwd=ROOT, check=False
        )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
