"""`python -m harness.export --format FORMAT RUN_DIR... --out DIR`, and the folder-wide form
`python -m harness.report --export FORMAT [RESULTS_DIR]` calls (`export_tree`).

Every run is read and every file rendered (and, for br0.2, validated) before the first one is
written: bad input (an unknown format, a folder that is not a finished run, a truncated or foreign
file) is one line on stderr and exit 2, with nothing written."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.config.errors import BAD_INPUT, BadInput
from harness.export import validate
from harness.export.formats import FORMATS
from harness.export.run_view import RunView, read_run
from harness.results.run_dir import RunDir
from harness.results.safe_write import SafeRoot


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        usage = " ".join(self.format_usage().split()[1:])
        print(f"error: {message} (usage: {usage})", file=sys.stderr)
        sys.exit(2)


def file_stems(paths: Sequence[Path]) -> list[str]:
    """One file stem per run: its folder's name, or its path below the runs' common folder (with
    `__` for `/`) when two runs share a name."""
    names = [p.resolve().name for p in paths]
    if len(set(names)) == len(names):
        return names
    resolved = [p.resolve() for p in paths]
    common = Path(os.path.commonpath(resolved))
    return ["__".join(p.relative_to(common).parts) or p.name for p in resolved]


def render(runs: Sequence[RunView], fmt_name: str) -> dict[str, str]:
    """File name -> text for every run, validated where the format validates; nothing written."""
    fmt = FORMATS.get(fmt_name)
    files: dict[str, str] = {}
    for run, stem in zip(runs, file_stems([r.path for r in runs])):
        text = fmt.render(run)
        if fmt.validates and validate.available():
            import json

            validate.check_br(json.loads(text), str(run.path))
        files[stem + fmt.suffix] = text
    return files


def write(files: dict[str, str], out: Path) -> list[Path]:
    root = SafeRoot(out)
    root.mkdir()
    return [root.put_text(out / name, text) for name, text in files.items()]


def export(run_dirs: Sequence[str | Path], fmt_name: str, out: Path) -> list[Path]:
    FORMATS.get(fmt_name)  # an unknown format is refused before any run is read
    runs = [read_run(p) for p in run_dirs]
    return write(render(runs, fmt_name), out)


def finished_runs(root: Path) -> list[Path]:
    """Run folders below `root` whose summary says ok (failed runs have nothing to export)."""
    import json

    found = []
    for summary in sorted(root.rglob(RunDir.SUMMARY)):
        try:
            status = json.loads(summary.read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError, AttributeError):
            raise BadInput(f"{summary}: unreadable run summary") from None
        if status == "ok":
            found.append(summary.parent)
    return found


def export_tree(root: Path, fmt_name: str, out: Path) -> list[Path]:
    """Every finished run below `root`, exported into `out`."""
    FORMATS.get(fmt_name)
    runs = finished_runs(root)
    if not runs:
        raise BadInput(f"{root}: no finished run below it; nothing to export")
    return export(runs, fmt_name, out)


def export_tree_main(root: Path, fmt_name: str, out: Path) -> int:
    """`python -m harness.report --export FORMAT`: export_tree, its errors as one line, exit 2."""
    try:
        written = export_tree(root, fmt_name, out)
    except BAD_INPUT + (OSError,) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    _announce(written, fmt_name)
    return 0


def _announce(written: list[Path], fmt_name: str) -> None:
    if FORMATS.get(fmt_name).validates and not validate.available():
        print(
            "note: llmd-benchmark-report is not installed (pip install -e '.[formats]'); "
            "the reports were written unvalidated",
            file=sys.stderr,
        )
    for path in written:
        print(path)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m harness.export", description=__doc__.splitlines()[0])
    parser.add_argument("--format", required=True, help=f"one of: {', '.join(FORMATS.names())}")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="finished run folders")
    parser.add_argument("--out", required=True, help="folder to write the files into")
    args = parser.parse_args(argv)
    try:
        written = export(args.run_dirs, args.format, Path(args.out))
    except BAD_INPUT + (OSError,) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    _announce(written, args.format)
    return 0


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
