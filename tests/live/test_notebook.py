"""notebooks/compare.ipynb executes top to bottom on a tiny results set (nbclient, kernel python3),
started from another folder with a relative results path, and leaves the results untouched.
Importing harness.report keeps the caller's matplotlib backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.report_support import write_results_tree

ROOT = Path(__file__).resolve().parents[2]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def test_compare_notebook_runs(tmp_path, monkeypatch):
    start = tmp_path / "start"  # where the user started Jupyter; the kernel runs in notebooks/
    results = write_results_tree(start / "results")
    before = snapshot(results)
    monkeypatch.chdir(start)
    monkeypatch.setenv("PWD", str(start))
    monkeypatch.setenv("PREFIXBENCH_RESULTS", "results")  # relative: to the start folder
    monkeypatch.setenv("PREFIXBENCH_REPORT_DIR", str(tmp_path / "report"))
    monkeypatch.setenv("MPLBACKEND", "Agg")  # headless
    nb = nbformat.read(ROOT / "notebooks" / "compare.ipynb", as_version=4)
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    client.execute(env=dict(os.environ))
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "30 runs (29 ok, 0 incomplete, 1 failed or interrupted)" in text and "overhead" in text
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "radix-lpm" in html and "n_not_ok" in html
    assert any("image/svg+xml" in o.get("data", {}) for o in outputs)
    assert (tmp_path / "report" / "figures" / "overhead.svg").exists()
    assert snapshot(results) == before  # read only


def test_importing_the_report_keeps_the_backend():
    code = "import matplotlib; matplotlib.use('pdf'); import harness.report; print(matplotlib.get_backend())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "pdf"


def test_reading_a_report_writes_nothing(tmp_path):
    from harness.report import build_report, describe

    results = write_results_tree(tmp_path / "results")
    before = snapshot(results)
    report = build_report(results)
    assert len(report.runs) == 30 and report.out_dir is None and report.figures == []
    assert "wrote" not in describe(report)
    assert snapshot(results) == before
