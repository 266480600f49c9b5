"""Bad input never runs and never leaves results that look real: one `error: ` line, exit 2.

Static problems (names, types, ranges) are caught by `harness.errors.preflight` before Hydra makes
a run directory; problems that need data (a trace line, a dataset record, a request longer than the
context or the KV capacity) fail inside the run through `harness.__main__.execute`, which records a
`failed` summary and writes no request table. Both are tested in-process; a few subprocesses check
the CLI end to end. tests/test_cli.py holds the first, basic cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.__main__ import EXIT_BAD_INPUT, execute
from harness.errors import CONF_DIR, preflight
from tests.test_cli import SMALL, SYSTEM_PROMPT_SMALL, harness, merged

BASE = merged(SYSTEM_PROMPT_SMALL, SMALL)


def with_base(args: list[str]) -> list[str]:
    """The small system-prompt run plus `args`; a different workload drops its fields."""
    other_workload = any(a.startswith("workload=") for a in args)
    return merged(SMALL if other_workload else BASE, args)


# (overrides, text the one error line must contain)
PREFLIGHT_CASES = [
    # unknown names list the valid ones
    (["workload=nope"], "unknown workload 'nope'; valid: dataset_sharegpt, fewshot,"),
    (["engine=nope"], "unknown engine 'nope'; valid: apc, apc_sglang, radix, radix_vllm"),
    (["model=nope"], "unknown model 'nope'; valid: s, smollm2-135m, tiny"),
    (["workload.nope=3"], "unknown field workload.nope; valid: family, group_distribution,"),
    (["engine.hash_algo=nope"], None),  # a registry name: checked when built (RUN_CASES)
    (["load.mode=nope"], "unknown load.mode 'nope'; valid: auto, burst, poisson, trace"),
    (["decode=nope"], "decode must be one of greedy, scripted, got 'nope'"),
    # negative or zero lengths and counts (workload fields, several families)
    (["workload.output_len=-1"], "workload.output_len must be a positive integer, got -1"),
    (
        ["workload.system_prompt_len=0"],
        "workload.system_prompt_len must be a positive integer, got 0",
    ),
    (["workload.prompts_per_group=0"], "workload.prompts_per_group must be a positive integer"),
    (["workload=parallel", "workload.n=0"], "workload.n must be a positive integer, got 0"),
    (
        ["workload=multiturn", "workload.num_rounds=-2"],
        "workload.num_rounds must be a positive integer",
    ),
    (
        ["workload=unique", "workload.prompt_len=0"],
        "workload.prompt_len must be a positive integer",
    ),
    (["workload=rag", "workload.docs_per_request=-1"], "workload.docs_per_request"),
    (
        ["workload=mooncake_conversation", "workload.max_requests=0"],
        "workload.max_requests must be",
    ),
    (
        ["workload.num_groups=1.5"],
        "workload.num_groups: Value '1.5' of type 'float' could not be converted",
    ),
    # engine counts and capacities
    (["engine.max_num_seqs=0"], "engine.max_num_seqs must be a positive integer, got 0"),
    (
        ["engine.max_num_batched_tokens=-5"],
        "engine.max_num_batched_tokens must be a positive integer",
    ),
    (
        ["engine.kv_capacity_tokens=0"],
        "engine.kv_capacity_tokens must be a positive integer, got 0",
    ),
    (
        ["engine=radix", "engine.max_prefill_tokens=0"],
        "engine.max_prefill_tokens must be a positive integer",
    ),
    (
        ["engine=radix", "engine.schedule_conservativeness=-1"],
        "engine.schedule_conservativeness must be",
    ),
    (["engine.lpm_fallback_queue_len=-1"], "engine.lpm_fallback_queue_len must be an integer >= 0"),
    # block / page size: a positive integer that divides the capacity
    (["engine.block_size=0"], "engine.block_size must be a positive integer, got 0"),
    (["engine.block_size=-16"], "engine.block_size must be a positive integer, got -16"),
    (
        ["engine.block_size=1.5"],
        "engine.block_size: Value '1.5' of type 'float' could not be converted",
    ),
    (
        ["engine.block_size=abc"],
        "engine.block_size: Value 'abc' of type 'str' could not be converted",
    ),
    (
        ["engine=radix", "engine.block_size=0"],
        "engine.block_size must be a positive integer, got 0",
    ),
    (
        ["engine.block_size=48"],
        "engine.kv_capacity_tokens (4096) must be a multiple of engine.block_size (48)",
    ),
    # model shape
    (
        ["model.max_position_embeddings=0"],
        "model.max_position_embeddings must be a positive integer",
    ),
    (["model.num_layers=-1"], "model.num_layers must be a positive integer"),
    # load mode and rate
    (
        ["load.mode=poisson"],
        "load.rate must be a positive number of requests/s for load.mode=poisson",
    ),
    (["load.mode=poisson", "load.rate=-1"], "load.rate must be a positive number, got -1.0"),
    (["load.mode=poisson", "load.rate=0"], "load.rate must be a positive number, got 0.0"),
    (["load.rate=abc"], "load.rate: Value 'abc' of type 'str' could not be converted to Float"),
    (
        ["load.mode=poisson", "load.rate=2", "load.burstiness=0"],
        "load.burstiness must be a positive",
    ),
    (["load.mode=trace", "load.slowdown=-1"], "load.slowdown must be a positive number, got -1.0"),
    # run-level fields
    (["warmup.num_requests=-1"], "warmup.num_requests must be an integer >= 0, got -1"),
    (["warmup.prompt_len=0"], "warmup.prompt_len must be a positive integer, got 0"),
    (["threads=0"], "threads must be a positive integer, got 0"),
    (["device=nope"], "device must be auto, cpu or cuda[:N], got 'nope'"),
    (["seed=abc"], "seed: Value 'abc' of type 'str' could not be converted to Integer"),
    (["engine.debug_checks=maybe"], "engine.debug_checks: Value 'maybe' is not a valid bool"),
]


@pytest.mark.parametrize(
    "args,needle", PREFLIGHT_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_preflight_names_the_problem(args, needle):
    problem = preflight(with_base(args))
    if needle is None:
        assert problem is None
        return
    assert problem is not None and needle in problem, problem
    assert "\n" not in problem


def test_preflight_accepts_the_defaults_and_the_small_config():
    assert preflight([]) is None
    assert preflight(BASE) is None


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["-m", "engine=apc,nope"], "unknown engine 'nope'; valid: apc, apc_sglang, radix, radix_vllm"),
        (["-m", "engine.block_size=16,abc"], "engine.block_size: Value 'abc' of type 'str'"),
        (["-m", "workload.nope=1,2"], "unknown field workload.nope"),
        (["-m", "engine.kv_capacity_tokens=4096,32"], None),  # in range for Hydra: the job fails
    ],
)
def test_preflight_of_a_sweep_checks_names_and_types_of_every_value(argv, needle):
    problem = preflight([argv[0], *merged(BASE, argv[1:])])
    assert problem is None if needle is None else needle in problem, problem


# ---------------------------------------------------------------- data-dependent, inside the run


def compose_config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"):
        return compose(config_name="config", overrides=overrides)


def trace_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


GOOD_LINE = '{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [0, 1]}'
TRACE = ["workload=mooncake_conversation", "workload.name=user_trace", "workload.block_size=16", "workload.max_requests=null"]
DATASET = ["workload=dataset_sharegpt"]
DATA_FILES = {  # written into each test's tmp_path; {d} below is that directory
    "bad_json.jsonl": f'{GOOD_LINE}\n{{"timestamp": 1, oops\n',
    "no_field.jsonl": '{"timestamp": 0, "input_length": 20, "hash_ids": [0, 1]}\n',
    "no_conversations.jsonl": '{"id": "r1", "turns": []}\n',
    "no_value.jsonl": '{"id": "r2", "conversations": [{"from": "human"}]}\n',
}
# name -> (overrides, text the one error line must contain)
RUN_CASES = {
    "kv too small (apc)": (
        ["engine.kv_capacity_tokens=48"],
        "request g1-q0 needs 60 KV tokens (prompt 56 + output 4) but engine.kv_capacity_tokens is 48",
    ),
    "kv too small (radix)": (
        ["engine=radix", "engine.kv_capacity_tokens=50"],
        "needs 60 KV tokens (prompt 56 + output 4) but engine.kv_capacity_tokens is 50",
    ),
    "prompt beyond context": (
        ["model.max_position_embeddings=32"],
        "request g1-q0 needs 60 tokens (prompt 56 + output 4) but the model's context is 32",
    ),
    "unknown hash": (
        ["engine.hash_algo=nope"],
        "unknown hash_algo 'nope'; valid: builtin, sha256,",
    ),
    "unknown eviction policy": (
        ["engine=radix", "engine.eviction_policy=nope"],
        "unknown eviction policy 'nope'; valid:",
    ),
    "unknown policy": (
        ["engine.policy=nope"],
        "unknown policy 'nope'; valid: dfs-weight, fcfs, lpm",
    ),
    "missing trace": (
        [*TRACE, "workload.path={d}/missing.jsonl"],
        "trace file '{d}/missing.jsonl' not found",
    ),
    "malformed trace line": (
        [*TRACE, "workload.path={d}/bad_json.jsonl"],
        "{d}/bad_json.jsonl:2: not valid JSON",
    ),
    "trace line missing a field": (
        [*TRACE, "workload.path={d}/no_field.jsonl"],
        "{d}/no_field.jsonl:1: missing field 'output_length'",
    ),
    "dataset missing conversations": (
        [*DATASET, "workload.path={d}/no_conversations.jsonl"],
        "no_conversations.jsonl: record 0 (id 'r1'): missing field 'conversations'",
    ),
    "dataset message missing a field": (
        [*DATASET, "workload.path={d}/no_value.jsonl"],
        "no_value.jsonl: record 0 (id 'r2'): message 0 needs string fields 'from' and 'value'",
    ),
    "missing dataset": (
        [*DATASET, "workload.path={d}/none.jsonl"],
        "dataset file '{d}/none.jsonl' not found",
    ),
}


@pytest.mark.parametrize("name", list(RUN_CASES))
def test_data_problems_fail_the_run_with_one_line(name, tmp_path, capsys):
    for file_name, text in DATA_FILES.items():
        (tmp_path / file_name).write_text(text)
    args, needle = RUN_CASES[name]
    overrides = with_base([a.format(d=tmp_path) for a in args])
    assert preflight(overrides) is None  # nothing static is wrong: the run itself must catch it
    run_dir = tmp_path / "run"
    code = execute(compose_config(overrides), run_dir)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle.format(d=tmp_path) in lines[0]
    assert "Traceback" not in err
    assert_failed_run_dir(run_dir)


def assert_failed_run_dir(run_dir: Path) -> None:
    """No summary, or one that says failed; never a request table."""
    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        assert data["status"] == "failed" and data["completed"] == 0, data
    assert not (run_dir / "requests.parquet").exists()


# ---------------------------------------------------------------- the CLI end to end (subprocesses)


def _assert_one_error_line(proc, needle: str) -> None:
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


def test_cli_static_problem_makes_no_run_directory(tmp_path):
    run_dir = tmp_path / "bad"
    proc = harness(merged(BASE, ["engine.block_size=1.5"]), run_dir, timeout=120)
    _assert_one_error_line(proc, "engine.block_size: Value '1.5' of type 'float'")
    assert not run_dir.exists()


def test_cli_malformed_trace_line_records_a_failed_run(tmp_path):
    path = trace_file(tmp_path, [GOOD_LINE, GOOD_LINE, "not json"])
    run_dir = tmp_path / "bad"
    proc = harness(with_base([*TRACE, f"workload.path={path}"]), run_dir, timeout=120)
    _assert_one_error_line(proc, f"{path}:3: not valid JSON")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert_failed_run_dir(run_dir)


def test_cli_sweep_with_a_value_of_the_wrong_type_runs_nothing(tmp_path):
    sweep_dir = tmp_path / "sweep"
    args = ["-m", *BASE, "engine.block_size=16,abc", f"hydra.sweep.dir={sweep_dir}"]
    proc = harness(args, tmp_path / "unused", timeout=120)
    _assert_one_error_line(proc, "engine.block_size: Value 'abc' of type 'str'")
    assert not sweep_dir.exists()
