"""Bad input never runs and never leaves results that look real: one `error: ` line, exit 2.

A table of bad inputs, each run the way the CLI runs it, in-process: `harness.config.preflight.preflight`
(every check that needs no data, before Hydra makes a directory), then `harness.run.execute.execute`
(problems that need the data: trace lines, dataset records, a request longer than the context or
the KV capacity). Each case must exit 2 with exactly one `error: ` line naming the field, no
traceback, within seconds (a watchdog fails a case that spins), and no run marked ok. The same
checks through the real command line: tests/live/test_cli_bad_input.py.
"""

from __future__ import annotations

import signal

import pytest

from harness.config.preflight import preflight
from harness.run.execute import EXIT_BAD_INPUT
from tests.bad_input_util import TRACE, prepare
from tests.harness_util import (
    BASE,
    SMALL,
    merged,
    run_like_the_cli,
    with_base,
)

WATCHDOG_S = 60  # a hang guard, not a speed test: the bad inputs below used to spin forever


DATASET = ["workload=dataset_sharegpt"]
MULTITURN = [
    "workload=multiturn",
    "workload.num_users=2",
    "workload.num_rounds=2",
    "workload.system_prompt_len=16",
    "workload.user_history_len=8",
    "workload.answer_len=4",
]
SIM = ["executor=simulated", "hardware=cpu_measured"]


def trace(name: str) -> list[str]:
    return [*TRACE, f"workload.path={{d}}/{name}"]


# (overrides, text the one error line must contain: it names the field or the file)
CASES: list[tuple[list[str], str]] = [
    # ---- unknown names list the valid ones
    (["workload=nope"], "unknown workload 'nope'; valid: agent, bailian_sample, dataset_sharegpt,"),
    (["engine=nope"], "unknown engine 'nope'; valid: apc, apc_sglang, radix, radix_vllm"),
    (["model=nope"], "unknown model 'nope'; valid: s, smollm2-135m, smollm2-rand, tiny"),
    (["hardware=nope"], "unknown hardware 'nope'; valid:"),
    (["workload.nope=3"], "unknown field workload.nope; valid: family, group_distribution,"),
    (["engine.nope=1"], "unknown field engine.nope"),
    (["+engine.blocksize=32"], "unknown field engine.blocksize; valid: async_scheduling,"),
    (["+workload.nope=3"], "unknown field workload.nope; valid: family,"),
    (["load.nope=1"], "unknown field load.nope"),
    (["bounds.nope=1"], "unknown field bounds.nope"),
    (["load.mode=nope"], "unknown load.mode 'nope'; valid: auto, burst, poisson, trace"),
    (["decode=nope"], "decode must be one of greedy, scripted, got 'nope'"),
    (["executor=nope"], "unknown executor 'nope'; valid: real, simulated"),
    (["engine.hash_algo=nope"], "unknown hash_algo 'nope'; valid: builtin, sha256,"),
    (["engine.policy=nope"], "unknown policy 'nope'; valid: dfs-weight, fcfs, lpm"),
    (["engine=radix", "engine.eviction_policy=nope"], "unknown eviction policy 'nope'; valid:"),
    (["engine.backend=nope"], "'nope'; valid:"),
    (["workload.group_distribution=nope"], "workload.group_distribution must be one of"),
    ([*MULTITURN, "workload.order=nope"], "workload.order must be one of"),
    (["workload=rag", "workload.layout=nope"], "workload.layout must be one of"),
    (["workload=fewshot", "workload.order_policy=nope"], "workload.order_policy must be one of"),
    (["model.dtype=nope"], "model.dtype must be one of"),
    (["model.weights=nope"], "model.weights must be one of"),
    # ---- integers: sign, zero, type
    (["workload.output_len=-1"], "workload.output_len must be a positive integer, got -1"),
    (
        ["workload.system_prompt_len=0"],
        "workload.system_prompt_len must be a positive integer, got 0",
    ),
    (["workload.prompts_per_group=0"], "workload.prompts_per_group must be a positive integer"),
    (["workload=parallel", "workload.n=0"], "workload.n must be a positive integer, got 0"),
    ([*MULTITURN, "workload.num_rounds=-2"], "workload.num_rounds must be a positive integer"),
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
    (["workload.num_groups=abc"], "workload.num_groups: Value 'abc'"),
    (["workload.num_groups=0"], "workload.num_groups must be a positive integer"),
    (["workload.version=0"], "workload.version must be a positive integer"),
    (["workload.seed_offset=-1"], "workload.seed_offset must be a non-negative integer"),
    (["workload.num_tenants=-1"], "workload.num_tenants must be a non-negative integer"),
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
        ["engine.kv_capacity_tokens=-16"],
        "engine.kv_capacity_tokens must be a positive integer, got -16",
    ),
    (
        ["engine=radix", "engine.max_prefill_tokens=0"],
        "engine.max_prefill_tokens must be a positive integer",
    ),
    (
        ["engine=radix", "engine.schedule_conservativeness=-1"],
        "engine.schedule_conservativeness must be",
    ),
    (
        ["engine=radix", "engine.schedule_conservativeness=nan"],
        "engine.schedule_conservativeness must be",
    ),
    (
        ["engine=radix", "engine.schedule_conservativeness=inf"],
        "engine.schedule_conservativeness must be",
    ),
    (["engine.lpm_fallback_queue_len=-1"], "engine.lpm_fallback_queue_len must be an integer >= 0"),
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
    (["engine.debug_checks=maybe"], "engine.debug_checks: Value 'maybe' is not a valid bool"),
    (["engine.prefix_caching=maybe"], "engine.prefix_caching: Value 'maybe' is not a valid bool"),
    # ---- model shape and numbers
    (
        ["model.max_position_embeddings=0"],
        "model.max_position_embeddings must be a positive integer",
    ),
    (["model.num_layers=-1"], "model.num_layers must be a positive integer"),
    (["model.rope_theta=nan"], "model.rope_theta must be a positive number"),
    (["model.rope_theta=inf"], "model.rope_theta must be a positive number"),
    (["model.rms_norm_eps=-1"], "model.rms_norm_eps must be a positive number"),
    (["model.head_dim=3"], "model.head_dim must be even"),
    (["model.num_kv_heads=3"], "must be a multiple of model.num_kv_heads (3)"),
    (["model.seed=-1"], "model.seed must be an integer in [0,"),
    (["model.seed=18446744073709551616"], "model.seed must be an integer in [0,"),
    # ---- load: NaN, infinity, sign, absurd sizes
    (
        ["load.mode=poisson"],
        "load.rate must be a positive number of requests/s for load.mode=poisson",
    ),
    (["load.mode=poisson", "load.rate=-1"], "load.rate must be a positive finite number"),
    (["load.mode=poisson", "load.rate=0"], "load.rate must be a positive finite number"),
    (["load.rate=abc"], "load.rate: Value 'abc' of type 'str' could not be converted to Float"),
    (["load.mode=poisson", "load.rate=nan"], "load.rate must be a positive finite number"),
    (["load.mode=poisson", "load.rate=inf"], "load.rate must be a positive finite number"),
    (
        ["load.mode=poisson", "load.rate=1e12"],
        "load.rate must be a positive finite number <= 1e+06",
    ),
    (
        ["load.mode=poisson", "load.rate=2", "load.burstiness=0"],
        "load.burstiness must be a positive",
    ),
    (["load.burstiness=nan"], "load.burstiness must be a positive finite number"),
    (["load.burstiness=inf"], "load.burstiness must be a positive finite number"),
    (["load.mode=trace", "load.slowdown=-1"], "load.slowdown must be a positive finite number"),
    (["load.slowdown=inf"], "load.slowdown must be a positive finite number"),
    (["load.slowdown=nan"], "load.slowdown must be a positive finite number"),
    (["load.slowdown=0"], "load.slowdown must be a positive finite number"),
    # ---- run-level fields, seeds, names that become paths
    (["warmup.num_requests=-1"], "warmup.num_requests must be an integer in [0,"),
    (["warmup.prompt_len=0"], "warmup.prompt_len must be an integer in [1,"),
    (["warmup.output_len=0"], "warmup.output_len must be an integer in [1,"),
    (["warmup.prompt_len=1000000"], "warmup.prompt_len must be an integer in [1, 4096]"),
    (["threads=0"], "threads must be an integer in [1, 1024], got 0"),
    (["threads=-3"], "threads must be an integer in [1, 1024], got -3"),
    (["device=nope"], "device must be auto, cpu or cuda[:N], got 'nope'"),
    (["seed=abc"], "seed: Value 'abc' of type 'str' could not be converted to Integer"),
    (["seed=-1"], "seed must be an integer in [0,"),
    (["seed=1180591620717411303424"], "seed must be an integer in [0,"),
    (
        ["workload.seed_offset=9223372036854775807", "seed=5"],
        "seed + workload.seed_offset must be below 2**63",
    ),
    (["label=../escape"], "label must be 1-100 letters, digits"),
    (["label=a/b"], "label must be 1-100 letters, digits"),
    (["workload.name=../../evil"], "workload.name must be 1-100 letters, digits"),
    (["workload.name=.hidden"], "workload.name must be 1-100 letters, digits"),
    (["save_tokens=maybe"], "save_tokens: Value 'maybe' is not a valid bool"),
    (["overwrite=maybe"], "overwrite: Value 'maybe' is not a valid bool"),
    # ---- workload numbers: NaN, infinity, ranges, think times
    (["workload.zipf_alpha=inf"], "workload.zipf_alpha must be a non-negative number, got inf"),
    (["workload.zipf_alpha=nan"], "workload.zipf_alpha must be a non-negative number, got nan"),
    (["workload.range_ratio=nan"], "workload.range_ratio"),
    (["workload.range_ratio=2"], "workload.range_ratio"),
    (
        [*MULTITURN, "workload.think_s=nan"],
        "workload.think_s must be a non-negative number, got nan",
    ),
    (
        [*MULTITURN, "workload.think_s=inf"],
        "workload.think_s must be a non-negative number, got inf",
    ),
    ([*MULTITURN, "workload.think_s=-1"], "workload.think_s must be a non-negative number"),
    (
        [*MULTITURN, "workload.think_s=100000"],
        "the last request would be released 100,000 s after the start",
    ),
    (
        ["workload=rag", "workload.zipf_alpha=inf"],
        "workload.zipf_alpha must be a non-negative number",
    ),
    (
        ["workload=mooncake_conversation", "workload.slowdown=nan"],
        "workload.slowdown must be a positive number",
    ),
    ([*DATASET, "workload.think_s=nan"], "workload.think_s must be a non-negative number"),
    # ---- bounds, checked before the run
    (["bounds.granularities=[0]"], "bounds.granularities[0] must be an integer in [1,"),
    (["bounds.granularities=[16,-16]"], "bounds.granularities[1] must be an integer in [1,"),
    (["bounds.granularities=[abc]"], "bounds.granularities"),
    (["bounds.max_fine_prompt_tokens=0"], "bounds.max_fine_prompt_tokens must be an integer"),
    # ---- memory: refused with the estimate before anything is generated or allocated
    (
        ["engine.kv_capacity_tokens=1000000000"],
        "engine.kv_capacity_tokens: this run needs an estimated",
    ),
    (
        [*MULTITURN, "workload.num_users=1000", "workload.num_rounds=1000"],
        "workload: this run needs an estimated",
    ),
    (
        [*SIM, "engine.kv_capacity_tokens=160000000000"],
        "engine.kv_capacity_tokens: this run needs an estimated",
    ),
    # ---- the simulated executor
    (
        ["executor=simulated"],
        "executor=simulated needs a cost model: select one with hardware=<preset>",
    ),
    (["hardware=h100_llama3_8b_bf16"], "executor=real would ignore it: add executor=simulated"),
    (["hardware.num_gpus=2"], "hardware.num_gpus: no hardware is selected, so it has no fields"),
    (["+server.base_url=x"], "server.base_url: no server is selected, so it has no fields"),
    ([*SIM, "decode=greedy"], "decode must be scripted for executor=simulated"),
    ([*SIM, "hardware.num_gpus=0"], "hardware.num_gpus must be a positive integer"),
    (
        [*SIM, "hardware.step_overhead_s=nan"],
        "hardware.step_overhead_s must be a finite number >= 0",
    ),
    (
        [*SIM, "hardware.step_overhead_s=-1"],
        "hardware.step_overhead_s must be a finite number >= 0",
    ),
    # ---- traces (need the data: caught inside the run)
    ([*TRACE, "workload.path={d}/missing.jsonl"], "trace file '{d}/missing.jsonl' not found"),
    (trace("bad_json.jsonl"), "{d}/bad_json.jsonl:2: not valid JSON"),
    (trace("no_field.jsonl"), "{d}/no_field.jsonl:1: missing field 'output_length'"),
    (
        trace("nan_time.jsonl"),
        "{d}/nan_time.jsonl:2: not valid JSON (NaN is not allowed (JSON numbers must be finite))",
    ),
    (
        trace("inf_time.jsonl"),
        "{d}/inf_time.jsonl:1: not valid JSON (Infinity is not allowed",
    ),
    (
        trace("neg_time.jsonl"),
        "{d}/neg_time.jsonl:1: timestamp must be a non-negative number of ms",
    ),
    (trace("late.jsonl"), "the last request would be released 100,000 s after the start"),
    (
        trace("huge_hash.jsonl"),
        "{d}/huge_hash.jsonl:1: hash_ids must be a non-empty list of integers in [0, 2**63)",
    ),
    (trace("no_hash.jsonl"), "{d}/no_hash.jsonl:1: hash_ids must be"),
    (
        trace("too_long.jsonl"),
        "{d}/too_long.jsonl:1: input_length 100 does not fit 2 hash_ids of 16 tokens",
    ),
    (trace("zero_out.jsonl"), "{d}/zero_out.jsonl:1: output_length must be an integer in [1,"),
    (trace("huge_len.jsonl"), "{d}/huge_len.jsonl:1: input_length must be an integer in [1,"),
    (trace("str_len.jsonl"), "{d}/str_len.jsonl:1: input_length must be an integer"),
    (trace("not_object.jsonl"), "{d}/not_object.jsonl:1: expected a JSON object, got list"),
    (trace("empty.jsonl"), "the workload produced no requests"),
    (trace("blank.jsonl"), "the workload produced no requests"),
    # ---- datasets
    (
        [*DATASET, "workload.path={d}/no_conversations.jsonl"],
        "no_conversations.jsonl: record 0 (id 'r1'): missing field 'conversations'",
    ),
    (
        [*DATASET, "workload.path={d}/no_value.jsonl"],
        "no_value.jsonl: record 0 (id 'r2'): message 0 needs string fields 'from' and 'value'",
    ),
    ([*DATASET, "workload.path={d}/none.jsonl"], "dataset file '{d}/none.jsonl' not found"),
    # ---- requests that can never run
    (
        ["engine.kv_capacity_tokens=48"],
        "request g1-q0 needs 60 KV tokens (prompt 56 + output 4) but engine.kv_capacity_tokens is 48",
    ),
    (
        ["engine=radix", "engine.kv_capacity_tokens=50"],
        "needs 60 KV tokens (prompt 56 + output 4) but engine.kv_capacity_tokens is 50",
    ),
    (
        # 50: each generated piece (48 system + 8 question tokens) fits, the whole request not
        ["model.max_position_embeddings=50"],
        "request g1-q0 needs 60 tokens (prompt 56 + output 4) but the model's context is 50",
    ),
    (
        ["model.max_position_embeddings=32"],  # the 48-token system prompt: refused as it is made
        "workload: a request needs 48 tokens in one piece",
    ),
    # ---- output directories (the preflight reads them from the command line)
    (["hydra.run.dir="], "hydra.run.dir: an empty path would write into the current directory"),
    (["hydra.run.dir={d}/a_file"], "hydra.run.dir: '{d}/a_file' exists and is not a directory"),
    (
        ["hydra.run.dir={d}/a_file/below"],
        "hydra.run.dir: cannot create or write '{d}/a_file/below'",
    ),
    (["hydra.sweep.dir={d}/a_file"], "hydra.sweep.dir: '{d}/a_file' exists and is not a directory"),
    (
        ["hydra.run.dir={d}/finished"],
        "hydra.run.dir: '{d}/finished' holds another run's results (summary.json)",
    ),
]


def case_id(case) -> str:
    return " ".join(case[0]).replace("{d}/", "")


@pytest.fixture
def watchdog():
    def expire(signum, frame):
        raise TimeoutError(f"a bad input ran for more than {WATCHDOG_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(WATCHDOG_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_the_table_is_large():
    assert len(CASES) >= 100


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_bad_input_is_one_line_exit_2(case, tmp_path, capsys, watchdog):
    prepare(tmp_path)
    args, needle = case
    overrides = with_base([a.format(d=tmp_path) for a in args])
    run_dir = tmp_path / "run"
    code, lines, err = run_like_the_cli(overrides, run_dir, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle.format(d=tmp_path) in lines[0], lines[0]
    assert "Traceback" not in err
    # Refused before or after the claim (a request larger than the KV pool): no run folder that
    # every later report would count.
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())


def test_defaults_and_the_small_config_pass_the_preflight():
    assert preflight([]) is None
    assert preflight(BASE) is None


@pytest.mark.parametrize(
    "argv,needle",
    [
        (
            ["-m", "engine=apc,nope"],
            "unknown engine 'nope'; valid: apc, apc_sglang, radix, radix_vllm",
        ),
        (["-m", "engine.block_size=16,abc"], "engine.block_size: Value 'abc' of type 'str'"),
        (["-m", "workload.nope=1,2"], "unknown field workload.nope"),
        (["-m", "engine.kv_capacity_tokens=4096,32"], None),  # in range for Hydra: the job fails
    ],
)
def test_preflight_of_a_sweep_checks_names_and_types_of_every_value(argv, needle):
    problem = preflight([argv[0], *merged(BASE, argv[1:])])
    assert problem is None if needle is None else needle in problem, problem


@pytest.fixture
def custom_workload(tmp_path):
    """A user's workload file in their own config folder, joined through hydra.searchpath (never
    written into conf/: other tests, on other workers, list and copy that folder meanwhile)."""

    def write(name: str, text: str) -> list[str]:
        (tmp_path / "workload").mkdir(exist_ok=True)
        (tmp_path / "workload" / f"{name}.yaml").write_text(text)
        return [f"hydra.searchpath=[file://{tmp_path}]", f"workload={name}"]

    return write


@pytest.mark.parametrize(
    "text,needle",
    [
        ("defaults:\n  - base_unique\nnum_prompts: [1, 2\n", "is not valid YAML: line 4"),
        (
            "name: custom\nfamily: unique\nnum_prompts: 2\n",
            "needs `defaults: [<one of base_bailian, base_dataset,",
        ),
        (
            "defaults:\n  - base_unique\n  - _self_\nname: c\nfamily: unique\nnum_groups: 3\n",
            "unknown field workload.num_groups",
        ),
        ("- just\n- a list\n", "must hold a mapping of fields"),
    ],
    ids=["syntax", "no defaults", "another family's field", "not a mapping"],
)
def test_custom_workload_files_are_checked_up_front(text, needle, custom_workload):
    problem = preflight(merged(SMALL, custom_workload("zz_custom_test", text)))
    assert problem is not None and needle in problem and "\n" not in problem, problem


# ---------------------------------------------------------------- the CLI end to end (subprocesses)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["executor=simulated"], "executor=simulated needs a cost model"),
        (["hardware=h100_llama3_8b_bf16"], "add executor=simulated, or drop hardware="),
    ],
)
def test_preflight_refuses_executor_and_hardware_mismatches(args, needle):
    """Refused before Hydra makes a directory (these used to leave a `failed` run folder, which
    every later report counted)."""
    from harness.config.preflight import preflight

    problem = preflight(merged(BASE, args))
    assert problem is not None and needle in problem
    sweep = preflight(["-m", *merged(BASE, args), "seed=0,1"])
    assert sweep is not None and needle in sweep
