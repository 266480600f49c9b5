"""Bad input and faults, round two: no hang, no unbounded allocation, no write outside results.

One table per class of issue [5/7]. Every case runs in its own process under a wall-clock timeout
and an address-space limit of 2 GiB (RLIMIT_AS), so a hang or an unbounded allocation fails the
case instead of the machine. Each case calls the layer that owns the problem (a reader, the
preflight, the metrics, the report, a claims or overhead command) the way the CLI calls it:
BadInput becomes one `error: ` line and exit 2. Data are generated per test in tmp_path; nothing
large is stored.

The process is a child forked from one helper that imported the heavy modules once (a zygote,
tests/zygote.py): it pays milliseconds where a fresh interpreter paid 2-5 s of imports. A case
whose subject a forked child cannot reproduce passes `fresh=True` and gets a fresh interpreter:
an environment variable read at import (PREFIXBENCH_MAX_LINE_BYTES, in workloads/readers.py).
The two lock holders that must live beside a case are fresh interpreters too.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness_util import ROOT
from tests.zygote import Zygote

AS_LIMIT = 2 * 2**30  # bytes of address space a case may map
TIMEOUT_S = 60  # a hang guard, not a speed test


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def _env(env: dict | None) -> dict[str, str]:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    full_env["PYTHONPATH"] = str(ROOT)
    return full_env


# What the cases import (what a fresh interpreter imported in each), imported once by the zygote;
# torch._dynamo and triton come with the real executor's first step. The zygote with all of these
# maps ~1.07 GB (VmSize; ~0.6 GB of it torch's), which a child starts with. The limit stays 2 GiB:
# a small run's child peaks at ~1.29 GB where a fresh interpreter peaked at 1.32-1.48 GB (its
# imports' own transient peaks), and the readers' bounds (16 MiB a line) stay far below the room.
PREIMPORTS = (
    "torch",
    "numpy",
    "pandas",
    "hydra",
    "omegaconf",
    "harness.config.errors",
    "harness.config.preflight",
    "harness.config.schema",
    "harness.config.startup_signals",
    "harness.results.identity",
    "harness.results.owned_dir",
    "harness.results.run_dir",
    "harness.run.compose",
    "harness.run.engine_target",
    "harness.run.execute",
    "harness.run.pipeline",
    "harness.report.build",
    "harness.report.stats",
    "harness.claims.experiment",
    "harness.claims.figures",
    "harness.claims.registry",
    "harness.claims.server",
    "harness.claims.writer",
    "engines.cache",
    "engines.real_executor",
    "torch._dynamo",
    "workloads.base",
    "workloads.progress",
    "workloads.tokenizer",
    "workloads.tokens",
    "hydra_plugins.hydra_joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher",
)
ZYGOTE = Zygote(PREIMPORTS, lambda: _env(None))


@pytest.fixture(scope="module", autouse=True)
def _zygote() -> Iterator[None]:
    """The zygote starts with the first case that needs it and is stopped after the last."""
    yield
    ZYGOTE.stop()


def run_py(body: str, timeout: int = TIMEOUT_S, env: dict | None = None, fresh: bool = False):
    """Run `body` as `python -c`, BadInput printed as the CLI prints it (exit 2)."""
    code = "import sys\nfrom harness.config.errors import BAD_INPUT\ntry:\n"
    code += textwrap.indent(textwrap.dedent(body), "    ")
    code += '\nexcept BAD_INPUT as exc:\n    print(f"error: {exc}", file=sys.stderr)\n'
    code += "    sys.exit(2)\n"
    return _run([sys.executable, "-c", code], timeout, env, fresh=fresh)


def run_module(args: list[str], timeout: int = TIMEOUT_S, env: dict | None = None, cwd=ROOT):
    return _run([sys.executable, "-m", *args], timeout, env, cwd)


def _run(cmd: list[str], timeout: int, env: dict | None, cwd=ROOT, fresh: bool = False):
    """`cmd` in a child of the zygote, or with `fresh` in a fresh interpreter; either way its own
    process, with the limit, `cwd` and the environment, and the timeout."""
    if not fresh:
        return ZYGOTE.run(cmd, _env(env), Path(cwd), timeout, AS_LIMIT)
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit,
    )


def assert_one_error(proc, needle: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def generate_body(params: dict) -> str:
    return f"""
from workloads.base import generate
from workloads.tokens import TokenSpace
reqs = generate({params!r}, 0, TokenSpace(vocab_size=49152, first_ordinary_id=17))
print(len(reqs))
"""


# ------------------------------------------------ class 1 and 4: readers (hangs, text that crashes)

GOOD_PROMPT = '{"prompt_ids": [20, 21, 22], "output_len": 2}\n'
GOOD_TRACE = '{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [0, 1]}\n'
GOOD_RECORD = {
    "id": "a",
    "conversations": [
        {"from": "human", "value": "hello there, how are you"},
        {"from": "gpt", "value": "fine thanks and you"},
    ],
}


def _prompts(path: Path) -> dict:
    return {"family": "prompts", "path": str(path), "output_len": 2}


def _trace(path: Path) -> dict:
    return {"family": "trace", "path": str(path), "block_size": 16}


def _dataset(path: Path) -> dict:
    return {"family": "dataset", "path": str(path)}


READER_CASES = {
    # class 1: a non-finite arrival time after the first line (hung the run's release loop)
    "prompt_inf_arrival_line2": (
        "p.jsonl",
        (GOOD_PROMPT + '{"prompt_ids": [20], "arrival_s": Infinity}\n').encode(),
        _prompts,
        "p.jsonl:2: not valid JSON (Infinity is not allowed",
    ),
    "prompt_overflow_arrival_line2": (
        "p.jsonl",
        (GOOD_PROMPT + '{"prompt_ids": [20], "arrival_s": 1e999}\n').encode(),
        _prompts,
        "p.jsonl:2: not valid JSON (1e999 overflows a float",
    ),
    # class 1: one 40 MB line (memory grew until the kernel killed the run)
    "prompt_huge_line": (
        "p.jsonl",
        b'{"prompt": "' + b"a" * 40_000_000 + b'"}\n',
        _prompts,
        "p.jsonl:1: line longer than 16,777,216 bytes",
    ),
    # class 4: invalid UTF-8 and lone surrogates
    "prompt_bad_utf8": (
        "p.jsonl",
        GOOD_PROMPT.encode() + b'{"prompt": "caf\xe9"}\n',
        _prompts,
        "p.jsonl:2: not valid UTF-8",
    ),
    "prompt_lone_surrogate": (
        "p.jsonl",
        b'{"prompt": "x \\ud800 y"}\n',
        _prompts,
        "p.jsonl:1: a string holds a lone UTF-16 surrogate",
    ),
    "trace_bad_utf8": (
        "t.jsonl",
        GOOD_TRACE.encode() + b'{"timestamp": 1, "x": "\xff\xfe"}\n',
        _trace,
        "t.jsonl:2: not valid UTF-8",
    ),
    "dataset_jsonl_bad_utf8": (
        "d.jsonl",
        json.dumps(GOOD_RECORD).encode() + b"\n" + b'{"id": "\xc3("}\n',
        _dataset,
        "d.jsonl:2: not valid UTF-8",
    ),
    "dataset_json_bad_utf8": (
        "d.json",
        b"[" + json.dumps(GOOD_RECORD).encode() + b',\n{"id": "\x80"}]',
        _dataset,
        "d.json:2: not valid UTF-8",
    ),
}


@pytest.mark.parametrize("name", sorted(READER_CASES))
def test_bad_data_files_are_one_line(name, tmp_path):
    file_name, data, params, needle = READER_CASES[name]
    path = tmp_path / file_name
    path.write_bytes(data)
    proc = run_py(generate_body(params(path)))
    assert_one_error(proc, needle)


def test_a_dataset_json_array_on_one_line_is_not_a_long_line(tmp_path):
    """The line limit is for JSONL lines; a .json array is bounded by the file limit only."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps([GOOD_RECORD] * 50))
    # workloads/readers.py reads the limit at import: a fresh interpreter, not the zygote's child
    env = {"PREFIXBENCH_MAX_LINE_BYTES": "1000"}
    proc = run_py(generate_body(_dataset(path)), env=env, fresh=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("kind", ["fifo", "dir", "dangling"])
def test_a_data_path_that_is_not_a_regular_file_is_refused_at_once(kind, tmp_path):
    path = tmp_path / "p.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone.jsonl")
    needle = {"fifo": "is a FIFO", "dir": "is a directory", "dangling": "is a dangling symlink"}
    proc = run_py(generate_body(_prompts(path)))
    assert_one_error(proc, needle[kind])


def test_a_tokenizer_without_an_unknown_token_is_one_line(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1}))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hello unseen"}\n')
    params = {**_prompts(path), "tokenizer": str(tmp_path / "tokenizer.json")}
    proc = run_py(generate_body(params))
    assert_one_error(proc, "cannot encode the text: WordLevel error: Missing [UNK] token")


def test_a_tokenizer_json_with_invalid_utf8_is_one_line(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(b'{"version": "1.0", "x": "\xff"}')
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hello"}\n')
    params = {**_prompts(path), "tokenizer": str(tmp_path / "tokenizer.json")}
    assert_one_error(run_py(generate_body(params)), "tokenizer.json:1: not valid UTF-8")


# ------------------------------------------------------- class 1 and 6: workload YAML files


def preflight_body(argv: list[str]) -> str:
    return f"""
from harness.config.preflight import preflight
problem = preflight({argv!r})
if problem:
    print(f"error: {{problem}}", file=sys.stderr)
    sys.exit(2)
"""


ALIAS_BOMB = (
    "defaults:\n  - base_unique\n  - _self_\nname: bomb\nfamily: unique\na: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(9)
    )
)
YAML_CASES = {
    "alias_bomb": ("text", ALIAS_BOMB.encode(), "YAML aliases (*name) are not allowed"),
    "duplicate_key": (
        "text",
        b"defaults:\n  - base_unique\n  - _self_\nname: c\nfamily: unique\nnum_prompts: 2\nnum_prompts: 3\n",
        "line 7: duplicate key 'num_prompts'",
    ),
    "bad_utf8": (
        "text",
        b"defaults:\n  - base_unique\n  - _self_\nname: \xff\n",
        "zz_case.yaml:4: not valid UTF-8",
    ),
    "fifo": ("fifo", b"", "is a FIFO, not a regular file"),
    "dir": ("dir", b"", "is a directory, not a regular file"),
    "dangling": ("dangling", b"", "is a dangling symlink"),
}


@pytest.mark.parametrize("name", sorted(YAML_CASES))
def test_bad_workload_yaml_files_are_one_line(name, tmp_path):
    kind, data, needle = YAML_CASES[name]
    (tmp_path / "workload").mkdir()
    path = tmp_path / "workload" / "zz_case.yaml"
    if kind == "text":
        path.write_bytes(data)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone.yaml")
    argv = [f"hydra.searchpath=[file://{tmp_path}]", "workload=zz_case", "model=tiny"]
    assert_one_error(run_py(preflight_body(argv)), needle)


# ------------------------------------------------------- whole runs (in a subprocess, in-process CLI)

SMALL_RUN = [
    "model=tiny",
    "engine.kv_capacity_tokens=4096",
    "engine.max_num_batched_tokens=256",
    "warmup.num_requests=1",
    "warmup.prompt_len=16",
    "warmup.output_len=2",
    "workload=system_prompt",
    "workload.num_groups=2",
    "workload.prompts_per_group=3",
    "workload.system_prompt_len=48",
    "workload.question_len=8",
    "workload.output_len=4",
]
SIM = ["executor=simulated", "hardware=cpu_measured"]


def execute_body(overrides: list[str], run_dir: Path) -> str:
    """preflight + execute, as `python -m harness` runs them (without Hydra's own run dir)."""
    return f"""
from pathlib import Path
from hydra import compose, initialize_config_dir
from harness.config.schema import CONF_DIR
from harness.run.execute import execute
from harness.config.preflight import preflight
problem = preflight({overrides!r})
if problem:
    print(f"error: {{problem}}", file=sys.stderr)
    sys.exit(2)
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"):
    cfg = compose(config_name="config", overrides={overrides!r})
sys.exit(execute(cfg, Path({str(run_dir)!r})))
"""


# ------------------------------------------------ class 3: a finished simulated run is recorded ok


# The slowest plausible step (issue 37 made larger overheads, 1e9 or 1e200 s, bad input:
# tests/live/test_serve_cli.py); the summary's peaks stay bounded at any clock speed.
@pytest.mark.parametrize("knob", ["hardware.step_overhead_s=10"])
def test_a_slow_simulated_clock_still_gives_a_summary(knob, tmp_path):
    run_dir = tmp_path / "run"
    proc = run_py(execute_body([*SMALL_RUN, *SIM, knob], run_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["completed"] == 6, summary


# ---------------------------------------- class 5: accepted values that crashed, or crashes as bad input

PREFLIGHT_CASES = {
    "device_meta": (["device=meta"], "device must be auto, cpu or cuda[:N], got 'meta'"),
    "device_mps": (["device=mps"], "device must be auto, cpu or cuda[:N], got 'mps'"),
    "zipf_1e308": (
        ["workload=rag", "workload.zipf_alpha=1e308"],
        "workload.zipf_alpha must be small enough that at least docs_per_request (3)",
    ),
}


@pytest.mark.parametrize("name", sorted(PREFLIGHT_CASES))
def test_values_that_crashed_are_refused_by_the_preflight(name):
    args, needle = PREFLIGHT_CASES[name]
    overrides = [*SMALL_RUN, *args]
    if any(a.startswith("workload=rag") for a in args):
        overrides = [o for o in overrides if not o.startswith("workload.")]
        overrides = [o for o in overrides if o != "workload=system_prompt"] + args
    assert_one_error(run_py(preflight_body(overrides)), needle)


def test_the_sglang_scheduler_refuses_a_pool_it_can_never_admit_into_up_front(tmp_path):
    """One token short of SGLang's admission headroom: exit 2 before the run, as under vLLM."""
    run_dir = tmp_path / "run"
    args = [*SMALL_RUN, "engine=radix", "engine.kv_capacity_tokens=61"]
    proc = run_py(execute_body(args, run_dir), timeout=120)
    assert_one_error(proc, "the SGLang scheduler admits it only with 62 free")
    ok = run_py(
        execute_body([*SMALL_RUN, "engine=radix", "engine.kv_capacity_tokens=62"], tmp_path / "ok"),
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr[-2000:]


# ------------------------------------------------------------- small mounts (read-only, full)


@pytest.fixture
def mount(tmp_path):
    """`mount(size, read_only)` -> a fresh tmpfs folder; permission bits prove nothing as root, a
    read-only or full file system does. Skipped where mounting is refused (no privilege)."""
    made: list[Path] = []

    def make(size: str = "1m", read_only: bool = False, fill: dict | None = None) -> Path:
        where = tmp_path / f"mnt{len(made)}"
        where.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        made.append(where)
        for name, text in (fill or {}).items():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(text)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return where

    yield make
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


# ------------------------------------------------ class 11: claims and overhead own their outputs


def test_claims_never_delete_a_runs_folder_they_did_not_make(tmp_path):
    mine = tmp_path / "runs" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("a user's file\n")
    proc = run_module(["harness.claims", "--out", str(tmp_path), "--only", "zero_hit", "--quick"])
    assert_one_error(proc, "runs exists and was not made by python -m harness.claims")
    assert mine.read_text() == "a user's file\n"


def test_claims_replace_only_their_own_runs_folder(tmp_path):
    from harness.results.owned_dir import MARKER, replace_owned

    folder = tmp_path / "runs"
    replace_owned(folder, "test")
    (folder / "old-run").mkdir()
    replace_owned(folder, "test")
    assert sorted(p.name for p in folder.iterdir()) == [MARKER]


@pytest.mark.parametrize("command", ["harness.claims", "harness.run.overhead"])
def test_an_out_that_is_a_file_is_one_line(command, tmp_path):
    target = tmp_path / "file"
    target.write_text("keep\n")
    proc = run_module(
        [command, "--out", str(target), *(["--quick"] if "claims" in command else [])]
    )
    assert_one_error(proc, "--out: ")
    assert target.read_text() == "keep\n"


def test_claims_out_on_a_read_only_file_system_is_one_line(mount):
    where = mount(read_only=True)
    proc = run_module(["harness.claims", "--out", str(where / "claims"), "--quick"])
    assert_one_error(proc, "--out: cannot create or write")


def test_overhead_refuses_an_unknown_model_in_one_line(tmp_path):
    proc = run_module(["harness.run.overhead", "--out", str(tmp_path / "o"), "model=nope"])
    assert_one_error(proc, "unknown model 'nope'; valid:")
    assert not (tmp_path / "o").exists()


# ------------------------------------------ class 8: writes outside the results folder through links


def test_a_run_never_writes_through_a_planted_log_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "harness.log").symlink_to(victim)
    proc = run_module(["harness", *SMALL_RUN, f"hydra.run.dir={run_dir}"], timeout=120)
    assert_one_error(proc, "harness.log is a symbolic link; results are never written through one")
    assert victim.read_text() == "untouched\n"


def test_a_run_dir_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").symlink_to(elsewhere)
    proc = run_py(execute_body(SMALL_RUN, tmp_path / "run"), timeout=120)
    assert_one_error(proc, "run is a symbolic link; results are never written through one")
    assert list(elsewhere.iterdir()) == []


def report_body(root: Path) -> str:
    return f"""
from harness.report.build import main
sys.exit(main([{str(root)!r}]))
"""


def _one_run(root: Path) -> None:
    run = root / "r1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "failed", "error": "x", "completed": 0}\n')


@pytest.mark.parametrize("planted", ["summary.csv", "figures"])
def test_the_report_never_writes_through_a_planted_link(planted, tmp_path):
    root = tmp_path / "results"
    _one_run(root)
    victim = tmp_path / "victim"
    if planted == "figures":
        victim.mkdir()
        (root / "figures").symlink_to(victim)
    else:
        victim.write_text("untouched\n")
        (root / "summary.csv").symlink_to(victim)
    proc = run_py(report_body(root), timeout=120)
    if planted == "summary.csv":
        assert_one_error(proc, "summary.csv is a symbolic link")
        assert victim.read_text() == "untouched\n"
    else:  # no figure is drawn for failed runs; nothing may appear in the link's target anyway
        assert list(victim.iterdir()) == [], proc.stderr[-2000:]


def test_the_safe_writer_refuses_links_and_paths_outside_its_root(tmp_path):
    from harness.results.safe_write import SafeFileHandler, SafeRoot, UnsafePath

    root = SafeRoot(tmp_path / "root")
    root.mkdir()
    (tmp_path / "outside").write_text("keep\n")
    (tmp_path / "root" / "link").symlink_to(tmp_path / "outside")
    for bad in (
        tmp_path / "outside",
        tmp_path / "root" / ".." / "outside",
        tmp_path / "root" / "link",
    ):
        with pytest.raises(UnsafePath):
            root.put_text(bad, "overwritten\n")
    with pytest.raises(UnsafePath):
        root.open_append(tmp_path / "root" / "link")
    with pytest.raises(UnsafePath):
        SafeFileHandler(str(tmp_path / "root" / "link"))
    assert (tmp_path / "outside").read_text() == "keep\n"
    assert root.put_text(tmp_path / "root" / "a" / "b.txt", "ok\n").read_text() == "ok\n"


# Modules that write a run or the report; only harness/results/safe_write.py may touch the file system.
WRITERS = [
    path
    for layer in ("", "config", "run", "results", "metrics", "report")
    for path in sorted((ROOT / "harness" / layer).glob("*.py"))
]
NOT_RUN_OR_REPORT = {"safe_write.py", "overhead.py", "owned_dir.py"}  # the writer; other tools
WRITE_METHODS = {
    "write_text",
    "write_bytes",
    "to_csv",
    "to_parquet",
    "to_json",
    "savefig",
    "write_table",
    "unlink",
    "rmtree",
    "replace",
    "remove",
    "rename",
    "symlink_to",
}


def _writes(path: Path) -> list[str]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = func.value if isinstance(func, ast.Attribute) else None
        first = node.args[0] if node.args else None
        at = 0 if owner is not None else 1  # Path.open(mode) or open(path, mode)
        modes = [k.value for k in node.keywords if k.arg == "mode"] + node.args[at : at + 1]
        if name == "open" and isinstance(owner, ast.Name) and owner.id == "os":
            found.append(f"{path.name}:{node.lineno} os.open")
        elif name == "open" and modes:
            mode = modes[0].value if isinstance(modes[0], ast.Constant) else "?"
            if any(c in str(mode) for c in "wax+?"):
                found.append(f"{path.name}:{node.lineno} open(..., {mode!r})")
        elif name in WRITE_METHODS and not (
            # a file object the writer handed over (`lambda f: df.to_csv(f)`), or str.replace
            (
                isinstance(first, ast.Name)
                and name in {"to_csv", "to_parquet", "to_json", "savefig", "write_table"}
            )
            or (name == "replace" and len(node.args) == 2 and not isinstance(owner, ast.Name))
            or (name == "replace" and isinstance(owner, ast.Name) and owner.id != "os")
            or (name == "remove" and not (isinstance(owner, ast.Name) and owner.id == "os"))
        ):
            found.append(f"{path.name}:{node.lineno} .{name}(...)")
    return found


def test_runs_and_the_report_write_only_through_the_path_safe_writer():
    offending = [w for p in WRITERS if p.name not in NOT_RUN_OR_REPORT for w in _writes(p)]
    assert offending == []


def test_the_boundary_check_sees_a_direct_write(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "df.to_csv(out / 'x.csv')\nopen(p, 'w')\nPath(p).write_text('x')\nfig.savefig(d / 'a.png')\n"
        "os.open(p, 1)\nos.remove(p)\nopen(p, mode='a')\nwith open(p) as f: pass\n"
        "path.open('a')\n"
    )
    assert len(_writes(sample)) == 8


# ------------------------------------------------ class 9: one configuration per row of the report


def test_the_fingerprint_covers_the_data_files_contents(tmp_path):
    path = tmp_path / "trace.jsonl"
    body = f"""
import json
from pathlib import Path
from harness.results.identity import fingerprint
config = {{"workload": {{"family": "trace", "path": {str(path)!r}}}, "seed": 0}}
Path({str(path)!r}).write_text('{{"timestamp": 0}}\\n')
first = fingerprint(config)
Path({str(path)!r}).write_text('{{"timestamp": 1}}\\n')
print(json.dumps([first, fingerprint(config)]))
"""
    proc = run_py(body)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = json.loads(proc.stdout.strip().splitlines()[-1])
    assert first != second


def test_runs_without_a_config_are_unknown_and_never_averaged(tmp_path):
    root = tmp_path / "results"
    for name, ttft in (("a", 10.0), ("b", 30.0)):
        (root / name).mkdir(parents=True)
        summary = {"status": "ok", "completed": 1, "mean_ttft_ms": ttft, "duration": 1.0}
        (root / name / "summary.json").write_text(json.dumps(summary))
    body = f"""
import json
from harness.report.build import build_report
table = build_report({str(root)!r}, figures=False).summary
print(json.dumps({{"fp": list(table["fingerprint"]), "ttft": list(table["mean_ttft_ms"])}}))
"""
    proc = run_py(body, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fp"] == ["unknown", "unknown"] and sorted(out["ttft"]) == [10.0, 30.0], out


# ----------------------------------------------------- class 10: one live process per run directory


def test_overwrite_never_takes_a_directory_another_live_run_holds(tmp_path):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom harness.results.identity import hold\n"
            f"hold(Path({str(run_dir)!r}))\nprint('held', flush=True)\ntime.sleep(120)\n",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_limit,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = run_module(
            ["harness", *SMALL_RUN, "overwrite=true", f"hydra.run.dir={run_dir}"], timeout=120
        )
        assert_one_error(proc, "is held by another live run")
        assert not (run_dir / ".hydra").exists() and not (run_dir / "harness.log").exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_ends_with_its_process(tmp_path):
    run_dir = tmp_path / "run"
    body = f"""
from pathlib import Path
from harness.results.identity import hold
hold(Path({str(run_dir)!r}))
hold(Path({str(run_dir)!r}))  # again from the same process: a no-op
"""
    assert run_py(body).returncode == 0
    assert run_py(body).returncode == 0  # the first process ended: its lock went with it


# ---------------------------------- class 7 (and 1): the report over corrupted or special results

GOOD_SUMMARY = {"status": "ok", "completed": 1, "mean_ttft_ms": 5.0, "duration": 1.0}
CORRUPT = {
    "summary_field_type": ("summary.json", {**GOOD_SUMMARY, "completed": "many"}),
    "summary_status_type": ("summary.json", {**GOOD_SUMMARY, "status": 7}),
    "manifest_config_list": ("manifest.json", {"config": [1, 2]}),
    "manifest_packages_str": ("manifest.json", {"packages": "torch"}),
}


def _results_with(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    (root / "good").mkdir(parents=True)
    (root / "good" / "summary.json").write_text(json.dumps(GOOD_SUMMARY))
    (root / "bad").mkdir()
    return root


def _report_rows(proc) -> list[str]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report_dirs_body(root: Path) -> str:
    return f"""
import json
from harness.report.build import build_report
report = build_report({str(root)!r}, figures=False, out_dir={str(root)!r})
print(json.dumps(sorted(report.runs["run_dir"])))
"""


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_the_report_skips_a_corrupted_run_and_keeps_the_others(name, tmp_path):
    root = _results_with(tmp_path)
    file_name, content = CORRUPT[name]
    if file_name == "manifest.json":
        (root / "bad" / "summary.json").write_text(json.dumps(GOOD_SUMMARY))
    (root / "bad" / file_name).write_text(json.dumps(content))
    proc = run_py(report_dirs_body(root), timeout=120)
    assert _report_rows(proc) == ["good"]
    assert "bad" in proc.stderr  # the warning names the skipped directory


@pytest.mark.parametrize("name", ["summary.json", "rows.jsonl", "requests.parquet"])
def test_the_report_never_blocks_on_a_fifo(name, tmp_path):
    root = _results_with(tmp_path)
    if name == "requests.parquet":
        (root / "bad" / "summary.json").write_text(json.dumps(GOOD_SUMMARY))
    os.mkfifo(root / "bad" / name)
    proc = run_py(report_dirs_body(root), timeout=120)
    assert _report_rows(proc) == ["good"]


def _assert_report_error(proc) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert [ln for ln in lines if ln.startswith("error: ")] == lines[-1:], proc.stderr[-3000:]
    assert "cannot write the report into" in lines[-1] and "Traceback" not in proc.stderr


def test_the_report_on_a_read_only_results_folder_is_one_line(mount):
    summary = json.dumps(GOOD_SUMMARY)
    where = mount(read_only=True, fill={"good/summary.json": summary})
    _assert_report_error(run_py(report_body(where), timeout=120))


def test_the_report_on_a_full_results_folder_leaves_no_empty_table(mount):
    summary = json.dumps(GOOD_SUMMARY)
    where = mount(size="64k", fill={"good/summary.json": summary})
    fd = os.open(where / "filler", os.O_WRONLY | os.O_CREAT)  # fill it to the last block
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    _assert_report_error(run_py(report_body(where), timeout=120))
    assert not (where / "summary.csv").exists()


# ------------------------------------ class 2: sizes checked against one estimate before allocation

SIZE_CASES = {
    "output_len": (["workload.output_len=1000000000"], "workload: this run needs an estimated"),
    "hidden_size": (
        ["model.hidden_size=262144", "model.head_dim=65536"],
        "model: this run needs an estimated",
    ),
    "vocab_size": (["model.vocab_size=1000000000"], "model: this run needs an estimated"),
    "knob": (["workload.output_len=100000"], "GiB are available (PREFIXBENCH_MEMORY_LIMIT"),
}


@pytest.mark.parametrize("name", sorted(SIZE_CASES))
def test_sizes_are_refused_by_the_estimate_before_anything_is_allocated(name):
    args, needle = SIZE_CASES[name]
    env = {"PREFIXBENCH_MEMORY_LIMIT": "10M"} if name == "knob" else None
    assert_one_error(run_py(preflight_body([*SMALL_RUN, *args]), env=env), needle)


def _bounded(params: dict) -> str:
    return f"""
from workloads.base import generate
from workloads.tokens import TokenSpace
space = TokenSpace(vocab_size=49152, first_ordinary_id=17, max_request_tokens=4096)
print(len(generate({params!r}, 0, space)))
"""


FILE_SIZE_CASES = {
    "prompt_line_output": (
        "p.jsonl",
        '{"prompt_ids": [20, 21], "output_len": 2147483648}\n',
        _prompts,
        "a request needs 2,147,483,648 tokens in one piece",
    ),
    "trace_line_output": (
        "t.jsonl",
        '{"timestamp": 0, "input_length": 20, "output_length": 2147483647, "hash_ids": [0, 1]}\n',
        _trace,
        "a request needs 2,147,483,647 tokens in one piece",
    ),
    "trace_block_size": (
        "t.jsonl",
        '{"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [0]}\n',
        lambda path: {**_trace(path), "block_size": 2**27},
        "a request needs 134,217,728 tokens in one piece",
    ),
    "dataset_output": (
        "d.jsonl",
        json.dumps(GOOD_RECORD) + "\n",
        lambda path: {**_dataset(path), "output_len": 2**31},
        "tokens in one piece (an output or prompt length",
    ),
}


@pytest.mark.parametrize("name", sorted(FILE_SIZE_CASES))
def test_sizes_read_from_files_are_bounded_before_allocation(name, tmp_path):
    file_name, text, params, needle = FILE_SIZE_CASES[name]
    path = tmp_path / file_name
    path.write_text(text)
    proc = run_py(_bounded(params(path)))
    assert_one_error(proc, needle)


# ------------------------------------------- class 6: start-up on unusable folders and Hydra groups


def test_results_existing_as_a_file_with_the_default_run_dir_is_one_line(tmp_path):
    (tmp_path / "results").write_text("not a folder\n")
    proc = run_module(["harness", *SMALL_RUN], cwd=tmp_path, timeout=120)
    assert_one_error(proc, "the default results folder: 'results' exists and is not a directory")


def test_a_read_only_working_directory_with_the_default_run_dir_is_one_line(mount):
    where = mount(read_only=True)
    proc = run_module(["harness", *SMALL_RUN], cwd=where, timeout=120)
    assert_one_error(proc, "the default results folder: cannot create or write 'results'")


def test_a_full_disk_before_the_run_is_one_line(mount):
    where = mount(size="64k", fill={"filler": "x" * 60_000})
    proc = run_module(["harness", *SMALL_RUN, f"hydra.run.dir={where}/run"], timeout=120)
    assert_one_error(proc, "its file system has")
    assert not (where / "run").exists()


def test_a_disk_that_fills_during_the_run_still_gets_a_summary(mount):
    import threading
    import time

    where = mount(size="1200k", fill={"filler": "x" * 100_000})
    run_dir = where / "run"

    def fill() -> None:  # once the run has claimed its directory, take every free block
        deadline = time.monotonic() + 100
        while not (run_dir / "rows.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        fd = os.open(where / "more", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)

    filler = threading.Thread(target=fill)
    filler.start()
    proc = run_module(
        ["harness", *SMALL_RUN, "save_tokens=true", f"hydra.run.dir={run_dir}"], timeout=120
    )
    filler.join()
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["status"] == "ok":  # the run finished before the disk filled: nothing to check
        pytest.skip("the run finished before the disk filled")
    assert summary["status"] == "failed" and "No space left" in summary["error"], summary
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")


def test_an_unknown_hydra_launcher_is_one_line():
    assert_one_error(
        run_py(preflight_body([*SMALL_RUN, "hydra/launcher=nope"])),
        "hydra/launcher=nope: In 'hydra/config': Could not find 'hydra/launcher/nope'",
    )


def test_the_lock_ends_with_the_runs_summary(tmp_path):
    """In-process callers (the claims, the tests) run many runs: a finished run lets go."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nfrom pathlib import Path\nfrom harness.results.identity import claim_run_dir as claim\n"
            "from harness.results.run_dir import RunDir\n"
            f"d = Path({str(run_dir)!r})\nclaim(d, RunDir.ROWS, False)\n"
            "RunDir(d).write_summary({'status': 'failed', 'completed': 0})\n"
            "print('done', flush=True)\ntime.sleep(120)\n",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_limit,
    )
    try:
        assert holder.stdout.readline().strip() == "done"
        body = f"from pathlib import Path\nfrom harness.results.identity import hold\nhold(Path({str(run_dir)!r}))\n"
        proc = run_py(body)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert not (run_dir / ".summary-reserve").exists()
    finally:
        holder.kill()
        holder.wait()
