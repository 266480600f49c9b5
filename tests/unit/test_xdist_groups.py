"""The xdist work units of tests/conftest.py: every test file that takes the session's vLLM server
is listed in SHARE_VLLM_SERVER, and those files are one unit, so one worker starts one server."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


def _takes_vllm_server(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    tests = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    return any(a.arg == "vllm_server" for fn in tests for a in fn.args.args)


def test_the_shared_server_files_are_the_files_taking_the_fixture():
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if _takes_vllm_server(p)
    }
    assert found == set(conftest.SHARE_VLLM_SERVER)


def test_the_shared_server_files_are_one_work_unit():
    units = {conftest.work_unit(f"{path}::test_x") for path in conftest.SHARE_VLLM_SERVER}
    assert units == {"vllm_server"}
    assert conftest.work_unit("tests/live/test_serve.py::test_x") == "tests/live/test_serve.py"
    assert conftest.work_unit("tests/live/test_serve.py::Case::test_x[a::b]") == (
        "tests/live/test_serve.py"
    )
