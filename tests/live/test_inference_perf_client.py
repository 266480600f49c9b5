"""inference-perf 0.7.0 (scripts/setup_clients.sh, .venv-inference-perf) drives
`harness.builtin_server` with its shared-prefix data (2 groups of 4 prompts, a 32-token system
prompt), as docs/interop.md §6.4's configuration; its per-request report, imported with the
server's request log, joins every row by the reply's id and carries the same cached tokens on
both sides, each group's first request a miss and the others a 32-token hit."""

from __future__ import annotations

import subprocess

import pandas as pd
import yaml

from tests.client_util import CLIENTS_HF_HOME, TOKENIZER_REPO, client_env, need, serving
from tests.export_support import report
from tests.harness_util import ROOT

INFERENCE_PERF = ROOT / ".venv-inference-perf" / "bin" / "inference-perf"
SNAPSHOT = "hub/models--prefixbench--smollm2/snapshots/" + "0" * 40


def config(url: str, storage, model: str = TOKENIZER_REPO) -> dict:
    groups = {"num_groups": 2, "num_prompts_per_group": 4, "system_prompt_len": 32}
    return {
        "api": {"type": "completion", "streaming": True},
        "data": {
            "type": "shared_prefix",
            "shared_prefix": {**groups, "question_len": 16, "output_len": 4},
        },
        "load": {"type": "constant", "num_workers": 1, "stages": [{"rate": 4, "duration": 2}]},
        "server": {
            "type": "vllm",
            "model_name": model,
            "base_url": url,
            "ignore_eos": True,
        },
        "tokenizer": {"pretrained_model_name_or_path": str(CLIENTS_HF_HOME / SNAPSHOT)},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True}},
        "storage": {"local_storage": {"path": str(storage)}},
    }


def test_inference_perf_drives_the_builtin_server_and_joins_its_log(tmp_path):
    client, _ = need(INFERENCE_PERF), need(CLIENTS_HF_HOME)
    log, out = tmp_path / "server_requests.jsonl", tmp_path / "inference-perf"
    with serving(log) as server:
        (tmp_path / "config.yml").write_text(yaml.safe_dump(config(server.url, out)))
        args = [str(client), "-c", str(tmp_path / "config.yml")]
        done = subprocess.run(
            args, cwd=tmp_path, env=client_env(), capture_output=True, text=True, timeout=400
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "run"
    code, _, err = report(
        "--import", "inference-perf", str(out), "--out", str(run), "--server-log", str(log)
    )
    assert code == 0, err
    table = pd.read_parquet(run / "requests.parquet")
    assert len(table) == 8 and table["server_request_id"].notna().all()
    assert table["cached_tokens"].tolist() == table["server_cached_tokens"].tolist()
    assert sorted(table["cached_tokens"]) == [0, 0] + [32] * 6
