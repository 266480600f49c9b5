"""notebooks/compare.ipynb executes top to bottom on a tiny results set (nbclient, kernel python3)."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.report_support import write_results_tree

ROOT = Path(__file__).resolve().parents[1]


def test_compare_notebook_runs(tmp_path, monkeypatch):
    results = write_results_tree(tmp_path / "results")
    monkeypatch.setenv("PREFIXBENCH_RESULTS", str(results))  # the kernel inherits this environment
    nb = nbformat.read(ROOT / "notebooks" / "compare.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute(env=dict(os.environ))
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "30 runs (29 ok, 1 not ok)" in text and "overhead" in text
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "radix-lpm" in html and "n_not_ok" in html
    assert any("image/svg+xml" in o.get("data", {}) for o in outputs)
    assert (results / "figures" / "overhead.svg").exists()
