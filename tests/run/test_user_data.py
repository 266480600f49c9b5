"""A user's own data end to end, in process, on both engines: a Mooncake-format trace and a prompt
JSONL from a workload YAML in the user's folder (hydra.searchpath), and a ShareGPT dump with bad
records whose skipped records are counted in the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.config.preflight import preflight
from harness.run.execute import EXIT_OK, execute
from tests.harness_util import SMALL, compose_config, summary_of
from tests.workload_util import DUMP

ENGINES = ["engine=apc", "engine=radix"]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def user_folder(tmp_path: Path, yaml_name: str, body: str) -> str:
    """A folder of the user's own configs, as Hydra's search path wants it."""
    (tmp_path / "myconf" / "workload").mkdir(parents=True)
    (tmp_path / "myconf" / "workload" / f"{yaml_name}.yaml").write_text(body)
    return f"hydra.searchpath=[file://{tmp_path / 'myconf'}]"


def run(tmp_path: Path, overrides: list[str], name: str) -> dict:
    overrides = [*SMALL, *overrides]
    assert preflight(overrides) is None
    run_dir = tmp_path / name
    assert execute(compose_config(overrides), run_dir) == EXIT_OK
    return summary_of(run_dir)


TRACE_ROWS = [  # block 16: sessions share their leading hash ids
    {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [0, 1, 2]},
    {"timestamp": 5, "input_length": 20, "output_length": 2, "hash_ids": [7, 8]},
    {"timestamp": 10, "input_length": 60, "output_length": 3, "hash_ids": [0, 1, 2, 3]},
    {"timestamp": 15, "input_length": 36, "output_length": 2, "hash_ids": [7, 8, 9]},
    {"timestamp": 20, "input_length": 16, "output_length": 4, "hash_ids": [5]},
    {"timestamp": 25, "input_length": 70, "output_length": 2, "hash_ids": [0, 1, 2, 3, 4]},
    {"timestamp": 30, "input_length": 30, "output_length": 3, "hash_ids": [7, 6]},
    {"timestamp": 35, "input_length": 33, "output_length": 2, "hash_ids": [0, 1, 11]},
    {"timestamp": 40, "input_length": 10, "output_length": 2, "hash_ids": [12]},
]  # nine lines: more than the 8 that mooncake_conversation replays


@pytest.mark.parametrize("engine", ENGINES)
def test_a_user_trace_runs_whole_under_its_own_name(tmp_path, engine):
    trace = write_jsonl(tmp_path / "my_trace.jsonl", TRACE_ROWS)
    body = f"defaults:\n  - base_trace\n  - _self_\nfamily: trace\npath: {trace}\nblock_size: 16\n"
    summary = run(tmp_path, [user_folder(tmp_path, "mine", body), "workload=mine", engine], "run")
    assert summary["workload"] == "my_trace"  # no name in the YAML: the file's stem
    assert summary["completed"] == len(TRACE_ROWS) and summary["load_mode"] == "trace"
    assert summary["hit_rate"] > 0


def test_a_shipped_trace_name_with_another_file_is_one_clear_line(tmp_path):
    trace = write_jsonl(tmp_path / "my_trace.jsonl", TRACE_ROWS)
    problem = preflight([*SMALL, "workload=mooncake_conversation", f"workload.path={trace}"])
    assert problem.startswith(f"workload.path '{trace}' is not the trace of workload mooncake")


PROMPTS = [
    {"prompt_ids": list(range(100, 140)), "output_len": 4, "session": "s1"},
    {"prompt_ids": list(range(100, 124)) + [7, 8], "output_len": 3},
    {"prompt_ids": list(range(100, 140)) + list(range(300, 310)), "output_len": 2, "session": "s1"},
    {"prompt_ids": list(range(200, 230)), "arrival_s": 0.01},
    {"prompt_ids": list(range(200, 230)) + [9], "output_len": 5, "arrival_s": 0.02},
]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_prompt_jsonl_runs_with_sessions_and_arrivals(tmp_path, engine):
    path = write_jsonl(tmp_path / "asks.jsonl", PROMPTS)
    body = (
        "defaults:\n  - base_prompts\n  - _self_\nname: my_prompts\nfamily: prompts\n"
        f"path: {path}\noutput_len: 6\n"
    )
    summary = run(tmp_path, [user_folder(tmp_path, "asks", body), "workload=asks", engine], "run")
    assert summary["workload"] == "my_prompts" and summary["completed"] == len(PROMPTS)
    assert summary["input_records"] == len(PROMPTS) and summary["load_mode"] == "trace"
    table = pd.read_parquet(tmp_path / "run" / "requests.parquet").set_index("request_id")
    assert table["output_tokens"].tolist() == [4, 3, 2, 6, 5]
    assert table.loc["asks-3", "turn"] == 1 and table.loc["asks-3", "session_id"] == "s1"
    assert table.loc["asks-3", "cached_tokens"] > 0  # the second turn reuses the first


def test_a_sharegpt_dump_with_bad_records_runs_and_reports_what_it_skipped(tmp_path):
    path = write_jsonl(tmp_path / "sharegpt.jsonl", DUMP)
    summary = run(tmp_path, ["workload=dataset_sharegpt", f"workload.path={path}"], "run")
    assert summary["completed"] == 3 and summary["input_records"] == len(DUMP)
    assert summary["input_skipped"] == 6
    assert summary["input_skipped_by_reason"]["starts_with_assistant"] == 1


def test_search_path_problems_are_one_line(tmp_path):
    assert "no viable alternative" in preflight([*SMALL, f"hydra.searchpath=[file://{tmp_path}"])
    folder = user_folder(
        tmp_path, "mine", "defaults:\n  - base_unique\n  - _self_\nfamily: unique\n"
    )
    problem = preflight([*SMALL, folder, "workload=minE"])
    assert problem.startswith("unknown workload 'minE'; valid: ") and "mine" in problem


EXTENDS_SYSTEM_PROMPT = """\
# Hydra's way: start from the shipped system_prompt (its family schema comes with it), change two.
defaults:
  - system_prompt
  - _self_
name: my_system_prompt
num_groups: 2
prompts_per_group: 2
system_prompt_len: 48
question_len: 8
output_len: 3
"""


def test_a_user_yaml_extends_a_shipped_workload(tmp_path):
    searchpath = user_folder(tmp_path, "my_system_prompt", EXTENDS_SYSTEM_PROMPT)
    # ... and a second user file extending the first: the family is found through the chain.
    (tmp_path / "myconf" / "workload" / "my_tiny.yaml").write_text(
        "defaults:\n  - my_system_prompt\n  - _self_\nname: my_tiny\nprompts_per_group: 1\n"
    )
    summary = run(tmp_path, [searchpath, "workload=my_system_prompt"], "run")
    assert summary["workload"] == "my_system_prompt" and summary["completed"] == 4
    assert summary["hit_rate"] > 0  # the shipped family's shared prompts, at the user's sizes
    cfg = compose_config([*SMALL, searchpath, "workload=my_tiny"])
    assert (cfg.workload.family, cfg.workload.num_groups, cfg.workload.prompts_per_group) == (
        "system_prompt",
        2,
        1,
    )
    assert preflight([*SMALL, searchpath, "workload=my_tiny"]) is None


@pytest.mark.parametrize(
    "parent, needle",
    [
        ("no_such_workload", "extends 'no_such_workload', which is no workload"),
        ("me", "extends itself through me -> me"),
    ],
)
def test_a_user_yaml_extending_nothing_or_itself_is_one_line(tmp_path, parent, needle):
    searchpath = user_folder(tmp_path, "me", f"defaults:\n  - {parent}\n  - _self_\nname: me\n")
    problem = preflight([*SMALL, searchpath, "workload=me"])
    assert problem is not None and needle in problem and "\n" not in problem, problem
