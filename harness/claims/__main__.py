"""`python -m harness.claims [--out DIR] [--quick] [--only KEY ...]`: every claim's verdict with numbers.

`--server URL` runs the server-runnable claims on a live vLLM server too (harness/claims/server.py);
`--server-off URL`, a second one started with prefix caching off, adds claim 7 (outputs on vs off).
Writes DIR/claims.md, DIR/claims.csv, DIR/figures/claim<N>.png and each claim's runs under
DIR/runs/ (replaced on every invocation when this command made it; any other DIR/runs is
refused and left alone). Exit 0 when every claim was measured (whatever its
verdict), 1 when a claim's experiment crashed (its row says so), 2 on bad arguments.

`run_claims` is `measure_claims` (every claim on one Context) then `write_claims` (the real-server
column and the two files); a caller keeping the findings in between calls the two itself.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

from harness.claims.experiment import Context
from harness.claims.figures import draw
from harness.claims.record import Checked, Claim, Finding, Row
from harness.claims.registry import CLAIMS, ordered
from harness.claims.server import server_column
from harness.claims.strength import Evidence
from harness.claims.writer import write_csv, write_markdown
from harness.config.errors import BAD_INPUT
from harness.results.owned_dir import check_out_dir, replace_owned

FIGURES = "figures"


def check_claim(claim: Claim, ctx: Context) -> tuple[Row, Finding | None]:
    """Measure one claim; a crash becomes a row saying so (never a verdict)."""
    start = time.perf_counter()
    first_run = len(ctx.used)
    finding: Finding | None
    try:
        finding = claim.measure(ctx)
    except Exception as exc:  # one claim's crash must not lose the others' results
        traceback.print_exc()
        finding = None
        verdict, result = f"failed: {type(exc).__name__}: {exc}", "the experiment crashed"
        setup = measured = ""
    else:
        verdict, result, setup, measured = (
            finding.verdict,
            finding.result,
            finding.setup,
            finding.measured,
        )
    figure = ""
    if finding is not None and finding.figure is not None:
        figure = f"{FIGURES}/claim{claim.number}-{claim.key}.png"
        draw(finding.figure, ctx.out_dir / figure)
    used = ctx.used[first_run:]
    evidence = Evidence(
        len({name for name, _ in used}),
        len({seed for _, seed in used}) or 1,
        finding.interval if finding is not None else "",
    )
    row = Row(
        claim.number,
        claim.statement,
        claim.source,
        claim.threshold,
        setup,
        measured,
        result,
        verdict,
        figure,
        time.perf_counter() - start,
        evidence=evidence.text(),
    )
    return row, finding


def measure_claims(claims: list[Claim], ctx: Context) -> list[Checked]:
    """Each claim checked in turn on the one Context (a run is made once: 16 reads 3's arms)."""
    checked = []
    for claim in claims:
        print(f"claim {claim.number} ({claim.key}) ...", file=sys.stderr, flush=True)
        row, finding = check_claim(claim, ctx)
        print(
            f"claim {claim.number}: {row.verdict} ({row.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        checked.append(Checked(claim, row, finding))
    return checked


def write_claims(
    out_dir: Path,
    checked: list[Checked],
    quick: bool,
    only: list[str] | None = None,
    server_url: str | None = None,
    server_off_url: str | None = None,
) -> list[Row]:
    """claims.csv and claims.md for the checked claims; the rows as written, their real-server
    column filled by `server_url` (else it says "not run"). The other arguments are the command
    line claims.md names."""
    on_server = server_column(server_url, quick, server_off_url)
    rows = [replace(c.row, real_server=on_server.get(c.row.number, "")) for c in checked]
    details = {c.claim.number: c.finding.details if c.finding else [] for c in checked}
    command = " ".join(
        [
            "python -m harness.claims",
            f"--out {out_dir}",
            *(["--quick"] if quick else []),
            *([f"--server {server_url}"] if server_url else []),
            *([f"--server-off {server_off_url}"] if server_off_url else []),
            *([f"--only {' '.join(only)}"] if only else []),
        ]
    )
    write_csv(rows, out_dir / "claims.csv")
    write_markdown(rows, details, command, out_dir / "claims.md")
    return rows


def claims_context(out_dir: Path, quick: bool) -> Context:
    """A Context writing into `out_dir`, the folder checked and made as `--out` is."""
    check_out_dir("--out", out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    replace_owned(out_dir / "runs", "python -m harness.claims")  # the previous invocation's runs
    return Context(out_dir, quick)


def run_claims(
    out_dir: Path,
    quick: bool,
    only: list[str] | None = None,
    server_url: str | None = None,
    server_off_url: str | None = None,
) -> list[Row]:
    """Measure the claims (all, or those named in `only`) and write claims.md / claims.csv;
    `server_url` (a live vLLM server) fills the real-server column, else it says "not run";
    `server_off_url` (one with prefix caching off) lets the full run check claim 7 there too."""
    claims = [CLAIMS.get(k) for k in only] if only else ordered()
    checked = measure_claims(claims, claims_context(out_dir, quick))
    return write_claims(out_dir, checked, quick, only, server_url, server_off_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.claims", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=Path("results/claims"), help="output folder")
    parser.add_argument("--quick", action="store_true", help="smaller experiments (about 3 min)")
    parser.add_argument(
        "--only", nargs="+", metavar="KEY", help=f"claims to run: {', '.join(CLAIMS.names())}"
    )
    parser.add_argument(
        "--server", metavar="URL", help="a live vLLM server for the real-server column"
    )
    parser.add_argument(
        "--server-off",
        metavar="URL",
        help="a second vLLM server started with prefix caching off (claim 7; needs --server)",
    )
    args = parser.parse_args(argv)
    if args.server_off and not args.server:
        print("error: --server-off needs --server (the caching-on server)", file=sys.stderr)
        return 2
    unknown = [k for k in args.only or [] if k not in CLAIMS]
    if unknown:
        print(
            f"error: unknown claim {unknown[0]!r}; valid: {', '.join(CLAIMS.names())}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        rows = run_claims(args.out, args.quick, args.only, args.server, args.server_off)
    except BAD_INPUT as exc:  # the output folder: one line, nothing measured
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out / 'claims.md'} and {args.out / 'claims.csv'}", file=sys.stderr)
    for r in rows:
        print(f"{r.number}. {r.verdict}: {r.result}")
    return 1 if any(r.verdict.startswith("failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
