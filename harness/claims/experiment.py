"""Runs for the claims: compose a configuration like the CLI does and run it in-process.

`run_arm` composes Hydra overrides over conf/config.yaml (through harness.config.CONF_DIR,
so the configs are found wherever they live), checks them like the CLI, claims its own run
directory under the claims output, writes the manifest and calls harness.runner.run. The result keeps the summary, the per-request
table and, when asked, the generated token ids.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import MISSING as MISSING_FACTORY
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.checks import check_known_keys, check_run_config
from harness.config import CONF_DIR, RunConfig
from harness.identity import claim, fingerprint
from harness.manifest import VIRTUAL_DEVICE, build_manifest
from harness.results import RunDir
from harness.rowlog import RowLog
from harness.runner import run


@dataclass(frozen=True)
class ArmResult:
    """One finished run: its summary, request rows, and output ids per request (if saved)."""

    name: str
    summary: dict
    requests: pd.DataFrame
    outputs: dict[str, tuple[int, ...]]


def compose_config(overrides: list[str]) -> tuple[RunConfig, dict]:
    """(RunConfig, resolved dict) for the overrides, as `python -m harness` would compose them."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="claims"):
        dcfg = compose(config_name="config", overrides=overrides)
    check_known_keys(dcfg)
    cfg = OmegaConf.to_object(dcfg)
    check_run_config(cfg)
    return cfg, OmegaConf.to_container(dcfg, resolve=True)


def run_arm(name: str, overrides: list[str], out_dir: Path, save_tokens: bool = False) -> ArmResult:
    """Run one configuration into out_dir/name; a run that is not ok raises RuntimeError."""
    args = [*overrides, f"save_tokens={str(save_tokens).lower()}"]
    cfg, resolved = compose_config(args)
    files = RunDir(out_dir / name)
    rows = RowLog(claim(files.path, RunDir.ROWS, overwrite=False))
    extra = {
        "device": VIRTUAL_DEVICE if cfg.executor != "real" else cfg.device,
        "config_fingerprint": fingerprint(resolved),
    }
    files.write_manifest(build_manifest(resolved, cfg.seed, extra))
    # The runner prints vLLM's result block and a progress bar; a failure is raised below.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        outcome = run(cfg, files, rows)
    summary = outcome.summary
    if summary.get("status") != "ok":
        raise RuntimeError(f"claims run {name} ({' '.join(overrides)}): {summary.get('error')}")
    outputs = _read_outputs(files.tokens_path) if save_tokens else {}
    return ArmResult(name, summary, pd.read_parquet(files.requests_path), outputs)


def _read_outputs(path: Path) -> dict[str, tuple[int, ...]]:
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["request_id"]: tuple(row["output_ids"]) for row in rows}


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
    """Where a claim's runs go and how big they are (`quick` for tests and smoke checks)."""

    out_dir: Path
    quick: bool

    def size(self, quick: object, full: object):
        return quick if self.quick else full

    def run(self, folder: str, name: str, overrides, save_tokens: bool = False) -> ArmResult:
        return run_arm(name, list(overrides), self.out_dir / "runs" / folder, save_tokens)
