"""SGLang 0.5.23's `bench_serving` (the opt-in .venv-sglang, scripts/setup_sglang.sh) drives
`harness.builtin_server` through its OpenAI completions backend with its generated-shared-prefix
data, one request at a time, and its `--output-details` line imports as a run: every request, in
send order, with the prompt lengths the server logged. Skipped without .venv-sglang (CI too: it is
opt-in) or .venv-clients (its tokenizer entry)."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from tests.client_util import CLIENTS_HF_HOME, TOKENIZER_REPO, client_env, need, serving
from tests.export_support import report
from tests.harness_util import ROOT

SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
SNAPSHOT = CLIENTS_HF_HOME / "hub/models--prefixbench--smollm2/snapshots" / ("0" * 40)
GROUPS, PER_GROUP = 2, 4


def test_sglang_bench_serving_drives_the_builtin_server(tmp_path):
    python = need(SGLANG_PYTHON, "scripts/setup_sglang.sh", in_ci=False)
    has = subprocess.run([str(python), "-c", "import datasets"], capture_output=True, timeout=120)
    if has.returncode != 0:  # sglang.benchmark.serving imports it; the --no-deps setup lacks it
        pytest.skip(".venv-sglang lacks the `datasets` package that sglang.bench_serving imports")
    need(CLIENTS_HF_HOME)  # the tokenizer entry
    log, out = tmp_path / "server_requests.jsonl", tmp_path / "bench.jsonl"
    with serving(log) as server:
        args = [
            str(python), "-m", "sglang.bench_serving", "--backend", "sglang-oai",
            "--base-url", server.url, "--model", TOKENIZER_REPO, "--tokenizer", str(SNAPSHOT),
            "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(GROUPS),
            "--gsp-prompts-per-group", str(PER_GROUP), "--gsp-system-prompt-len", "64",
            "--gsp-question-len", "16", "--gsp-output-len", "4",
            "--num-prompts", str(GROUPS * PER_GROUP), "--max-concurrency", "1", "--seed", "0",
            "--output-file", str(out), "--output-details", "--cache-report",
        ]  # fmt: skip
        done = subprocess.run(
            args, cwd=tmp_path, env=client_env(), capture_output=True, text=True, timeout=400
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "run"
    code, _, err = report("--import", "sglang-bench", str(out), "--out", str(run))
    assert code == 0, err
    table = pd.read_parquet(run / "requests.parquet")
    served = pd.read_json(log, lines=True)
    # the client's warm-up request comes first in the server's log, then the run in send order
    assert len(table) == GROUPS * PER_GROUP == len(served) - 1
    assert table["prompt_tokens"].tolist() == served["prompt_tokens"].tolist()[1:]
    assert table["output_tokens"].tolist() == [4] * len(table)
