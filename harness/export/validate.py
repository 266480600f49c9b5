"""Checking a Benchmark Report document against `llmd-benchmark-report`'s own Pydantic models
(the optional extra `formats`). Without the package a document is written unchecked and the CLI
says so; with it, a document the models refuse is never written."""

from __future__ import annotations

import importlib.util
import json

from harness.config.errors import BadInput

PACKAGE = "llmd_benchmark_report"


def available() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None


def check_br(document: dict, where: str) -> None:
    """Load `document` (as its JSON text reads back) with the package's models; BadInput naming
    `where` and the first problem when they refuse it."""
    from llmd_benchmark_report import load_benchmark_report
    from pydantic import ValidationError

    try:
        load_benchmark_report(json.loads(json.dumps(document)))
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()
        raise BadInput(
            f"{where}: the exported report does not validate: {' '.join(first[:3])}"
        ) from None
