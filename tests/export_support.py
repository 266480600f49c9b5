"""Helpers of the export tests: the Benchmark Report package (the optional extra `formats`; its
absence fails under CI=true and skips elsewhere), a document loaded back with the package's models
and checked against its JSON schema, and the export CLI called in this process."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from harness.export.cli import main as export_main

# The workload of the committed aiperf trace (tests/data/aiperf/trace.mooncake.jsonl): its
# in-process export must equal that file, and aiperf's replay of it the in-process run.
ZIPF_SYSTEM_PROMPT = [
    "workload=system_prompt",
    "workload.num_groups=3",
    "workload.prompts_per_group=4",
    "workload.system_prompt_len=40",
    "workload.question_len=8",
    "workload.output_len=4",
    "workload.group_distribution=zipf",
]


def br_package() -> ModuleType:
    try:
        import llmd_benchmark_report
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs llmd-benchmark-report (pip install -e '.[formats]')")
        pytest.skip("llmd-benchmark-report is not installed (the `formats` extra)")
    return llmd_benchmark_report


def load_back(path: Path):
    """The exported file as the package reads it, after checking it against the package's own
    JSON schema file (br_v0_2_json_schema.json)."""
    pkg = br_package()
    import jsonschema  # type: ignore[import-untyped]

    schema_file = Path(str(pkg.__file__)).parent / "br_v0_2_json_schema.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    document = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.validate(document, schema)
    return pkg.import_benchmark_report(str(path))


def export(*args: str) -> tuple[int, str, str]:
    """`python -m harness.export ARGS` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = export_main(list(args))
        except SystemExit as exc:  # argparse's own exits
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def report(*args: str) -> tuple[int, str, str]:
    """`python -m harness.report ARGS` in this process: (exit code, stdout, stderr)."""
    from harness.report.build import main as report_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = report_main(list(args))
    return code, out.getvalue(), err.getvalue()
