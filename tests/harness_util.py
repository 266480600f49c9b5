"""Run the harness in this process: compose the config as `python -m harness` would and call its
`execute`, capturing stdout/stderr. A test pays milliseconds instead of ~14 s of imports per run;
only a handful of true CLI tests (argv parsing, exit codes, signals) spawn `python -m harness`.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.config.preflight import preflight
from harness.config.schema import CONF_DIR, register_configs
from harness.run.execute import EXIT_BAD_INPUT, execute
from harness.run.target import Target

register_configs()  # the schemas Hydra composes against

ROOT = Path(__file__).resolve().parents[1]

# A small model and cache for runs that check behaviour, not scale.
SMALL = [
    "model=tiny",
    "engine.kv_capacity_tokens=4096",
    "engine.max_num_batched_tokens=256",
    "warmup.num_requests=1",
    "warmup.prompt_len=16",
    "warmup.output_len=2",
]
SYSTEM_PROMPT_SMALL = [
    "workload=system_prompt",
    "workload.num_groups=2",
    "workload.prompts_per_group=3",
    "workload.system_prompt_len=48",
    "workload.question_len=8",
    "workload.output_len=4",
]


def merged(*groups: list[str]) -> list[str]:
    """Overrides with later keys replacing earlier ones (Hydra rejects duplicates)."""
    out: dict[str, str] = {}
    for group in groups:
        for arg in group:
            out[arg.partition("=")[0]] = arg
    return list(out.values())


@dataclass(frozen=True)
class InProcessRun:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


def run_harness(overrides: list[str], run_dir: Path, target: Target | None = None) -> InProcessRun:
    """One single-run job of `python -m harness <overrides>` writing into `run_dir` (`target`:
    measure this one, as execute's)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        dcfg = compose("config", overrides=list(overrides))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = execute(dcfg, Path(run_dir), target=target)
    return InProcessRun(code, out.getvalue(), err.getvalue(), Path(run_dir))


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


BASE = merged(SYSTEM_PROMPT_SMALL, SMALL)


def with_base(args: list[str]) -> list[str]:
    """The small system-prompt run plus `args`; a different workload drops its fields."""
    other_workload = any(a.startswith("workload=") for a in args)
    return merged(SMALL if other_workload else BASE, args)


def compose_config(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"):
        return compose(config_name="config", overrides=overrides)


def assert_failed_run_dir(run_dir: Path) -> None:
    """No summary, or one that says failed; never a request table."""
    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        assert data["status"] == "failed" and data["completed"] == 0, data
    assert not (run_dir / "requests.parquet").exists()
    assert not (run_dir / "rows.jsonl").exists()


def run_like_the_cli(overrides: list[str], run_dir: Path, capsys) -> tuple[int, list[str], str]:
    """(exit code, non-blank stderr lines, stderr) of preflight + execute, as `python -m harness`."""
    problem = preflight(overrides)
    if problem is not None:
        return EXIT_BAD_INPUT, [f"error: {problem}"], f"error: {problem}\n"
    hydra_free = [o for o in overrides if not o.startswith("hydra.")]
    code = execute(compose_config(hydra_free), run_dir)
    err = capsys.readouterr().err
    return code, [ln for ln in err.splitlines() if ln.strip()], err
