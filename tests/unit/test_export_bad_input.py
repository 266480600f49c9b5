"""`python -m harness.export` on bad input: one line on stderr, exit 2, nothing written (an
unknown format, a folder that is not a finished run, truncated or foreign files), even when the
bad run comes after good ones."""

from __future__ import annotations

import json

import pytest

from tests.export_support import export
from tests.report_support import write_failed, write_run


def _one_line(code: int, stdout: str, stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2 and stdout == ""
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _truncated(run, name: str):
    """`run` with its file `name` cut to half its bytes."""
    data = (run / name).read_bytes()
    (run / name).write_bytes(data[: len(data) // 2])
    return run


def test_an_unknown_format_lists_the_valid_ones(tmp_path):
    good = write_run(tmp_path, "good")
    line = _one_line(*export("--format", "br9", str(good), "--out", str(tmp_path / "out")))
    assert "unknown export format 'br9'; valid: bailian, br0.2, mooncake" in line
    assert not (tmp_path / "out").exists()


def test_missing_arguments_are_one_line(tmp_path):
    line = _one_line(*export("--format", "br0.2", str(tmp_path)))
    assert "--out" in line


BREAKERS = {
    "no such folder": lambda run: run / "nope",
    "not a run": lambda run: run.parent,  # the folder above holds no summary.json
    "truncated summary": lambda run: _truncated(run, "summary.json"),
    "truncated requests": lambda run: _truncated(run, "requests.parquet"),
    "foreign summary": lambda run: (run / "summary.json").write_text('{"benchmarks": []}') and run,
    "foreign manifest": lambda run: (run / "manifest.json").write_text('{"x": 1}') and run,
    "manifest not an object": lambda run: (run / "manifest.json").write_text("[1]") and run,
}
NEEDLES = {
    "no such folder": "not a run directory (no such folder)",
    "not a run": "not a run directory (no summary.json)",
    "truncated summary": "unreadable run",
    "truncated requests": "unreadable run",
    "foreign summary": "run status is None",
    "foreign manifest": "manifest.json holds no config",
    "manifest not an object": "unreadable run",
}


@pytest.mark.parametrize("fmt", ["br0.2", "mooncake"])
@pytest.mark.parametrize("breaker", list(BREAKERS))
def test_a_bad_run_after_good_ones_writes_nothing(tmp_path, breaker, fmt):
    good = write_run(tmp_path / "runs", "good")
    bad = BREAKERS[breaker](write_run(tmp_path / "runs" / "sub", "bad"))
    out = tmp_path / "out"
    line = _one_line(*export("--format", fmt, str(good), str(bad), "--out", str(out)))
    assert NEEDLES[breaker] in line and "Traceback" not in line
    assert not out.exists()


def test_a_failed_run_is_refused(tmp_path):
    failed = write_failed(tmp_path, "failed")
    line = _one_line(*export("--format", "br0.2", str(failed), "--out", str(tmp_path / "out")))
    assert "run status is 'failed'; only finished runs (ok) are exported" in line


def test_report_export_of_a_tree_without_finished_runs(tmp_path):
    from harness.report.build import main as report_main

    write_failed(tmp_path / "results", "failed")
    assert report_main([str(tmp_path / "results"), "--export", "br0.2"]) == 2
    assert not (tmp_path / "results" / "export").exists()


def test_two_runs_of_one_name_get_their_paths(tmp_path):
    a, b = write_run(tmp_path / "x", "run"), write_run(tmp_path / "y", "run")
    code, stdout, stderr = export("--format", "br0.2", str(a), str(b), "--out", str(tmp_path / "o"))
    assert code == 0, stderr
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == ["x__run.br0.2.json", "y__run.br0.2.json"]
    assert json.loads((tmp_path / "o" / names[0]).read_text())["version"] == "0.2.1"
