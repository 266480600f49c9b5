"""The xdist work units of tests/conftest.py: every test file whose tests take a shared session
fixture (the vLLM server, the quick claims) is listed under the fixture's name in
SHARED_FIXTURE_FILES, and each such group is one unit, so one worker makes the fixture once;
and the order the slow files run in (RUN_ORDER)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


def _takes(fixture: str, path: Path) -> bool:
    tree = ast.parse(path.read_text())
    functions = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    return any(a.arg == fixture for fn in functions for a in fn.args.args)


@pytest.mark.parametrize("fixture", sorted(conftest.SHARED_FIXTURE_FILES))
def test_each_group_is_the_files_taking_its_fixture(fixture):
    found = {
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if _takes(fixture, p)
    }
    assert found == set(conftest.SHARED_FIXTURE_FILES[fixture])


def test_each_group_is_one_work_unit_and_no_file_is_in_two():
    files = [path for paths in conftest.SHARED_FIXTURE_FILES.values() for path in paths]
    assert len(files) == len(set(files))
    for fixture, paths in conftest.SHARED_FIXTURE_FILES.items():
        assert {conftest.work_unit(f"{path}::test_x") for path in paths} == {fixture}
    assert conftest.work_unit("tests/live/test_serve.py::test_x") == "tests/live/test_serve.py"
    assert conftest.work_unit("tests/live/test_serve.py::Case::test_x[a::b]") == (
        "tests/live/test_serve.py"
    )


def test_the_run_order_names_live_files_and_puts_cpu_timing_last():
    for path in conftest.RUN_ORDER:
        assert (ROOT / path).is_file() and path.startswith("tests/live/"), path
    ranks = [conftest.run_rank(f"{path}::t", slow=True) for path in conftest.RUN_ORDER]
    assert set(ranks) == {0, 2}
    assert conftest.run_rank("tests/live/test_cli.py::t", slow=True) == 1
    assert conftest.run_rank("tests/unit/test_report.py::t", slow=False) == 3
    # the files ranked first start vLLM servers of their own (not the session's)
    starts = re.compile(r"start_vllm|VllmLaunch|fleet\.real")
    for path, rank in conftest.RUN_ORDER.items():
        if rank == 0:
            assert starts.search((ROOT / path).read_text()), path
            assert path not in conftest.SHARED_FIXTURE_FILES["vllm_server"]
