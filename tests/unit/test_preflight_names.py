"""Issue 48: an unknown suite appended with `+suite=` lists the valid suites, and a search path
that is not there (relative or absolute, with or without `file://`) is one line naming it, not
"unknown workload" later; a bare relative folder is read as Hydra reads it."""

from __future__ import annotations

import pytest

from harness.config.preflight import options, preflight


@pytest.mark.parametrize("args", [["+suite=nosuch"], ["-m", "+suite=nosuch"], ["suite=nosuch"]])
def test_an_unknown_suite_lists_the_valid_ones(args):
    problem = preflight(args)
    assert problem is not None and problem.startswith("unknown suite 'nosuch'; valid: ")
    assert all(name in problem for name in options("suite")) and "main_smoke" in problem


@pytest.mark.parametrize("entry", ["file://no/such/confs", "no/such/confs", "file:///no/such"])
def test_a_missing_search_folder_is_named(entry):
    problem = preflight([f"hydra.searchpath=[{entry}]", "workload=mine"])
    assert problem is not None and problem.startswith("hydra.searchpath: "), problem
    assert "is no folder" in problem and "workload/" in problem


@pytest.fixture
def own_configs(tmp_path, monkeypatch):
    (tmp_path / "mine" / "workload").mkdir(parents=True)
    (tmp_path / "mine" / "workload" / "mine.yaml").write_text(
        "defaults:\n  - unique\n  - _self_\nnum_prompts: 4\n"
    )
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("entry", ["file://mine", "mine", "./mine", "file://./mine"])
def test_a_relative_search_folder_is_read_from_the_working_directory(own_configs, entry):
    assert preflight([f"hydra.searchpath=[{entry}]", "workload=mine", "model=tiny"]) is None


def test_an_unknown_name_says_where_it_was_looked_for(own_configs):
    problem = preflight(["hydra.searchpath=[mine]", "workload=yours"])
    assert problem is not None and "valid: " in problem and "mine," in problem, problem
    assert "conf/workload/" in problem and "mine/workload/" in problem, problem
