"""`python -m harness.advise workload=prompts workload.path=my.jsonl [hardware=<preset>]
[engine.kv_capacity_tokens=N] [executor=real] [--quick] [--name NAME] [--server URL]`: which prefix cache for
this traffic, answered in the terminal and in results/advice/<name>/advice.md.

Exit codes: 0 ok; 2 bad input (one `error: ` line, nothing left behind); 1 a failed run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

from harness.advise.server import FLAVOURS
from harness.config.errors import config_errors, describe

ADVICE_DIR = Path("results") / "advice"


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m harness.advise",
        description="Which prefix cache (apc or radix) and settings serve this traffic best, and why.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small grid (burst + one Poisson rate, 1 seed)"
    )
    parser.add_argument("--name", help="the advice folder's name (default: <workload>-<time>)")
    parser.add_argument("--out", default=str(ADVICE_DIR), help="where advice folders go")
    parser.add_argument(
        "--server", help="a live server's URL: its measured hit rate beside the designs'"
    )
    parser.add_argument(
        "--server-flavour", default="vllm", choices=FLAVOURS, help="conf/server/<flavour>.yaml"
    )
    return parser.parse_known_args(argv)


def advise(argv: list[str]) -> int:
    from harness.advise.traffic import read_traffic

    args, overrides = parse(argv)
    flags = [o for o in overrides if o.startswith("-")]
    if flags:
        return _bad(
            f"unknown option {flags[0]}; allowed: --quick, --name, --out, --server, "
            "--server-flavour and Hydra overrides key=value"
        )
    try:
        traffic = read_traffic(overrides)
    except config_errors() as exc:
        return _bad(describe(exc))
    name = args.name or f"{traffic.cfg.workload.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out = Path(args.out) / name
    if out.exists():
        return _bad(f"{out} exists; give another --name")
    out.mkdir(parents=True)
    try:
        text = _measure_and_write(traffic, out, args)
    except config_errors() as exc:  # found by a run's own checks, or a server that fails: the
        shutil.rmtree(out, ignore_errors=True)  # folder goes, nothing half-written is kept
        where = f"--server {args.server}: " if args.server else ""
        return _bad(f"{where}{describe(exc)}")
    print(text)
    print(f"advice: {out / 'advice.md'}", file=sys.stderr)
    return 0


def _measure_and_write(traffic, out: Path, args: argparse.Namespace) -> str:
    """The server's runs first (an unreachable one fails at once), the grid, then the files."""
    from harness.advise.figure import draw
    from harness.advise.grid import patterns
    from harness.advise.runner import run_grid
    from harness.advise.server import run_server
    from harness.advise.text import Advice, render
    from harness.advise.verdict import answers
    from harness.advise.why import causes, ceilings

    pats = patterns(traffic.has_times, args.quick)
    served = run_server(traffic, out, pats, args.server, args.server_flavour) if args.server else []
    grid = run_grid(traffic, out, args.quick)
    names = [p.name for p in pats]
    where = {n: grid.where(n) for n in names}
    found = answers(grid.runs, where)
    grid.runs.to_csv(out / "grid.csv", index=False)
    figure = draw(grid.runs, found, where, out)
    why = [c for c in (causes(grid.runs, p) for p in names) if c is not None]
    advice = Advice(traffic, pats, grid, found, why, ceilings(grid.runs), figure.name, args.quick)
    text = render(dataclasses.replace(advice, served=served))
    (out / "advice.md").write_text(text, encoding="utf-8")
    verdicts = {a.goal.name: a.verdict for a in found}
    (out / "verdicts.json").write_text(json.dumps(verdicts, indent=1), encoding="utf-8")
    return text


def _bad(line: str) -> int:
    print(f"error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> None:
    sys.exit(advise(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
