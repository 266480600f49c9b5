"""`engines/` imports and runs without hydra, omegaconf, datasets, `workloads` or `harness`: a GPU
image may lack them (docs/design.md §2: engines see token ids only). A simulated engine, and the
harness around a simulated run, run without torch: importing it is ~2.5 s of every replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.abc, sys

BLOCKED = ("hydra", "omegaconf", "datasets", "workloads", "harness")

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked in this test: {name}")
        return None

sys.meta_path.insert(0, Block())
from engines.batch import run_batch
import engines.build, engines.cache.apc, engines.cache.radix, engines.simulate.executor
import engines.attention.backend, engines.attention.triton_paged, engines.kv_pool
from engines.build import build_engine
from engines.config import EngineConfig
from engines.model.presets import get_preset
from engines.request import GenerationRequest

for cache, bs in (("apc", 16), ("radix", 1)):
    cfg = EngineConfig(cache=cache, block_size=bs, kv_capacity_tokens=1024, backend="torch")
    engine = build_engine(cfg, get_preset("tiny"), device="cpu")
    prompt = tuple(range(1, 40))
    (a,) = run_batch(engine, [GenerationRequest("a", prompt, 3)])
    (b,) = run_batch(engine, [GenerationRequest("b", prompt, 3)])
    assert b.cached_tokens > 0 and a.output_ids == b.output_ids, (cache, a, b)
print("standalone ok")
"""


SIMULATED_WITHOUT_TORCH = r"""
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("torch", "triton"):
            raise ImportError(f"blocked in this test: {name}")
        return None

sys.meta_path.insert(0, Block())
import runpy
sys.argv = ["harness", "executor=simulated", "hardware=h100_llama3_8b_bf16", "model=tiny",
            "workload.num_groups=2", "workload.prompts_per_group=2", "warmup.num_requests=1", "hydra.run.dir=" + sys.argv[1]]
runpy.run_module("harness", run_name="__main__", alter_sys=True)  # python -m harness
"""


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_engines_import_and_run_without_hydra_datasets_workloads_harness():
    proc = _run(SCRIPT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "standalone ok" in proc.stdout


def test_a_simulated_run_never_imports_torch(tmp_path):
    proc = _run(SIMULATED_WITHOUT_TORCH, str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["completed"] == 4
