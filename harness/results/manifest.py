"""manifest.json: everything needed to reproduce a run or explain a difference between two runs.

Resolved config and seed, git revision, package versions, device and platform, UTC timestamp.
Nothing identifies the machine's owner: no hostname, user or paths.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.metadata
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# The device a simulated run records: it loads no model (execute.py and the claims write it).
VIRTUAL_DEVICE = "virtual"
PACKAGES = ("torch", "triton", "numpy", "pandas", "pyarrow", "hydra-core", "prefixbench")


def build_manifest(
    resolved_config: Mapping[str, object], seed: int, extra: Mapping[str, object] | None = None
) -> dict:
    """The manifest of one run; `extra` (e.g. the executor's device string) is merged last."""
    sha, dirty = repo_git_state()
    manifest = {
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "config": dict(resolved_config),
        "git_sha": sha,
        "git_dirty": dirty,
        "packages": {"python": platform.python_version(), **package_versions(PACKAGES)},
        "platform": platform.platform(),  # OS, kernel and libc: no node name
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        **_torch_facts((extra or {}).get("device")),
    }
    manifest.update(extra or {})
    return manifest


@functools.cache
def repo_git_state() -> tuple[str | None, bool | None]:
    """This checkout's git state, asked once per process: a sweep's runs share one interpreter and
    one checkout, and each `git` call is a child process."""
    return git_state(REPO_ROOT)


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """(HEAD sha, whether the working tree differs from it); (None, None) outside a checkout.

    Untracked files that git does not ignore count as dirty: they are code HEAD does not contain.
    """
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if Path(top).resolve() != root.resolve():  # e.g. installed inside some other repository
            return None, None
        sha = _git(root, "rev-parse", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain"))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, dirty


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout.strip()


def package_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo on Linux, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _torch_facts(device: object) -> dict[str, object]:
    """Torch's intra-op threads (they set CPU speed) and the CUDA device name, if any. None for a
    simulated run (VIRTUAL_DEVICE): it loads no model and never imports torch (~2.5 s here)."""
    none: dict[str, object] = {"torch_num_threads": None, "cuda_device": None}
    if device == VIRTUAL_DEVICE:
        return none
    try:
        import torch
    except ImportError:
        return none
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"torch_num_threads": torch.get_num_threads(), "cuda_device": cuda}
