"""Before a run: the configuration composed from overrides and checked, the run directory claimed
(never another run's results) and the manifest written with the device as resolved.

The CLI (harness/run/execute.py) gets its config from Hydra and starts at `typed`; the claims and
the overhead tool start at `compose`. Then the pipeline (harness/run/pipeline.py) runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from harness.config.checks import check_known_keys, check_run_config
from harness.config.compose_memo import compose_config
from harness.config.schema import CONF_DIR, RunConfig
from harness.results.identity import claim_run_dir, fingerprint
from harness.results.manifest import VIRTUAL_DEVICE, build_manifest
from harness.results.rowlog import RowLog
from harness.results.run_dir import RunDir


@dataclass(frozen=True)
class Composed:
    """A checked configuration and its resolved form (what the manifest records)."""

    cfg: RunConfig
    resolved: dict


def compose(overrides: list[str], job_name: str = "harness") -> Composed:
    """The configuration `python -m harness OVERRIDES` would run, composed (memoised on its group
    choices: harness/config/compose_memo.py) and checked."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name=job_name):
        return checked(compose_config(overrides))


def checked(dcfg: DictConfig) -> Composed:
    """A composed Hydra config as a checked RunConfig (unknown keys and bad values refused)."""
    return with_values_checked(dcfg, typed(dcfg))


def typed(dcfg: DictConfig) -> RunConfig:
    """The config as a RunConfig, unknown keys refused; its values are not checked yet."""
    check_known_keys(dcfg)
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, RunConfig)
    return cfg


def with_values_checked(dcfg: DictConfig, cfg: RunConfig) -> Composed:
    """`cfg` (typed from `dcfg`) with its values checked, beside its resolved form."""
    check_run_config(cfg)
    resolved = OmegaConf.to_container(dcfg, resolve=True)
    assert isinstance(resolved, dict)
    return Composed(cfg, resolved)


def identity(composed: Composed) -> dict[str, object]:
    """What the manifest records beside the config: the device as resolved, the fingerprint and,
    for a real run, whether decode steps ran as CUDA graphs and where random weights were drawn
    (the config says `null` / `target`; these say what that meant here)."""
    cfg = composed.cfg
    facts: dict[str, object] = {}
    if cfg.executor == "real":
        from engines.build import cuda_graphs_mode, resolve_device

        resolved = resolve_device(cfg.device)
        device = str(resolved)
        facts["cuda_graphs"] = cuda_graphs_mode(cfg.engine, resolved)
        facts["weights_init_device"] = device if cfg.model.init_device == "target" else "cpu"
    else:
        device = VIRTUAL_DEVICE
    return {"device": device, "config_fingerprint": fingerprint(composed.resolved), **facts}


def start(run_dir: Path, overwrite: bool) -> tuple[RunDir, RowLog]:
    """Claim `run_dir` (never another run's results) and open its append-only rows file."""
    out = RunDir(Path(run_dir))
    return out, RowLog(claim_run_dir(out.path, RunDir.ROWS, overwrite))


def write_manifest(out: RunDir, composed: Composed) -> None:
    out.write_manifest(build_manifest(composed.resolved, composed.cfg.seed, identity(composed)))
