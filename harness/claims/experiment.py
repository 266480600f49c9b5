"""Runs for the claims: compose a configuration like the CLI does and run it in-process.

`run_arm` runs one arm through the run pipeline (harness/run/pipeline.py) exactly as the CLI does:
compose and check the overrides, claim the arm's run directory under the claims output, write the
manifest (resolved device included), prepare, measure, finish. The result keeps the summary, the
per-request table and, when asked, the generated token ids.

The claims' reference (docs/claims.md) was measured with SGLang's non-overlap event loop, so an
arm under SGLang's scheduler runs that loop unless the arm sets `engine.overlap` itself (claim 24
does, to compare the loops); `engine=radix` alone now runs the overlap loop, upstream's default.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import MISSING as MISSING_FACTORY
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from harness.config.schema import CONF_DIR, RunConfig
from harness.run.compose import Composed, compose, start, write_manifest
from harness.run.pipeline import run
from harness.run.targets import target_for


@dataclass(frozen=True)
class ArmResult:
    """One finished run: its summary, request rows, and output ids per request (if saved)."""

    name: str
    summary: dict
    requests: pd.DataFrame
    outputs: dict[str, tuple[int, ...]]


def compose_config(overrides: list[str]) -> tuple[RunConfig, dict]:
    """(RunConfig, resolved dict) for the overrides, as `python -m harness` would compose them."""
    composed = compose(overrides, job_name="claims")
    return composed.cfg, composed.resolved


def run_arm(name: str, overrides: list[str], out_dir: Path, save_tokens: bool = False) -> ArmResult:
    """Run one configuration into out_dir/name; a run that is not ok raises RuntimeError."""
    args = [*overrides, f"save_tokens={str(save_tokens).lower()}"]
    composed = claims_compose(args)
    files, rows = start(out_dir / name, overwrite=False)
    write_manifest(files, composed)
    # The pipeline prints vLLM's result block and a progress bar; a failure is raised below.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        outcome = run(composed.cfg, files, rows, target_for(composed.cfg))
    summary = outcome.summary
    if summary.get("status") != "ok":
        raise RuntimeError(f"claims run {name} ({' '.join(overrides)}): {summary.get('error')}")
    outputs = _read_outputs(files.tokens_path) if save_tokens else {}
    return ArmResult(name, summary, pd.read_parquet(files.requests_path), outputs)


# SGLang's non-overlap loop (`--disable-overlap-schedule`), the loop the claims were measured in
PLAIN_LOOP = "engine.overlap=false"


def plain_loop_missing(cfg: RunConfig, overrides: list[str]) -> bool:
    """Whether `cfg` (composed from `overrides`) is under SGLang's scheduler with no override
    choosing its event loop: the claims then add PLAIN_LOOP."""
    chosen = any(o.lstrip("+").startswith("engine.overlap=") for o in overrides)
    return cfg.engine.scheduler_design == "sglang" and not chosen


def claims_compose(overrides: list[str]) -> Composed:
    """`overrides` composed as a claim runs them: plus SGLang's non-overlap loop where
    `plain_loop_missing` (every claim composes through this; only such runs compose twice)."""
    composed = compose(list(overrides), job_name="claims")
    if plain_loop_missing(composed.cfg, overrides):
        return compose([*overrides, PLAIN_LOOP], job_name="claims")
    return composed


def _read_outputs(path: Path) -> dict[str, tuple[int, ...]]:
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["request_id"]: tuple(row["output_ids"]) for row in rows}


def _seed_of(overrides) -> int:
    """The run's seed as its overrides set it (the config's default, 0, otherwise)."""
    seeds = [o.split("=", 1)[1] for o in overrides if o.startswith("seed=")]
    return int(seeds[-1]) if seeds else 0


def has_option(group: str, key: str) -> bool:
    """Whether the run configuration has `group.key` (an option another change may add)."""
    spec = RunConfig.__dataclass_fields__.get(group)
    factory = getattr(spec, "default_factory", MISSING_FACTORY)
    if factory is MISSING_FACTORY:
        return False
    return key in {f.name for f in fields(factory())}


def has_preset(group: str, name: str) -> bool:
    return (CONF_DIR / group / f"{name}.yaml").is_file()


@dataclass(frozen=True)
class Context:
    """Where a claim's runs go and how big they are (`quick` for tests and smoke checks).

    A run is made once per invocation: a claim that reads another claim's arms (16 reads 3's)
    asks for the same folder, name and overrides and gets the finished run back; the same name
    with other overrides is a bug and raises."""

    out_dir: Path
    quick: bool
    done: dict[tuple[str, str], tuple[tuple[str, ...], ArmResult]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # every run a claim made or read, as (folder/name, seed): its evidence size (strength.py)
    used: list[tuple[str, int]] = field(default_factory=list, compare=False, repr=False)

    def size(self, quick: object, full: object):
        return quick if self.quick else full

    def note(self, name: str, seed: int) -> None:
        """Count a run made outside `run` (claim 1's interleaved pairs) as evidence."""
        self.used.append((name, seed))

    def run(self, folder: str, name: str, overrides, save_tokens: bool = False) -> ArmResult:
        args = (*overrides, f"save_tokens={save_tokens}")
        key = (folder, name)
        self.note(f"{folder}/{name}", _seed_of(overrides))
        if key in self.done:
            made_with, result = self.done[key]
            if made_with != args:
                raise RuntimeError(
                    f"claims run {folder}/{name} asked for twice with other overrides"
                )
            return result
        result = run_arm(name, list(overrides), self.out_dir / "runs" / folder, save_tokens)
        self.done[key] = (args, result)
        return result
