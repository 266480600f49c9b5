"""guidellm 0.8.1 (scripts/setup_clients.sh, .venv-guidellm) drives `harness.builtin_server` with
its synthetic shared-prefix data, one request at a time, as docs/interop.md §6.3's command; its
report, imported with the server's request log, joins every row by the reply's id and carries the
same cached tokens on both sides: the first request misses, the others hit the 32-token prefix."""

from __future__ import annotations

import subprocess

import pandas as pd

from tests.client_util import CLIENTS_HF_HOME, TOKENIZER_REPO, client_env, need, serving
from tests.export_support import report
from tests.harness_util import ROOT

GUIDELLM = ROOT / ".venv-guidellm" / "bin" / "guidellm"
COUNT = 6


def test_guidellm_drives_the_builtin_server_and_joins_its_log(tmp_path):
    guidellm, _ = need(GUIDELLM), need(CLIENTS_HF_HOME)
    log, out = tmp_path / "server_requests.jsonl", tmp_path / "guidellm"
    with serving(log) as server:
        backend = f"kind=openai_http,target={server.url},model={TOKENIZER_REPO}"
        args = [
            str(guidellm), "run", "--backend", f"{backend},request_format=/v1/completions",
            "--profile", "kind=synchronous", "--constraint", f"kind=max_requests,count={COUNT}",
            "--data", "kind=synthetic_text,prompt_tokens=48,output_tokens=4,prefix_tokens=32",
            "--output", f"kind=json,path={out / 'benchmarks.json'}",
            "--disable-console-interactive",
        ]  # fmt: skip
        done = subprocess.run(args, env=client_env(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "run"
    code, _, err = report(
        "--import", "guidellm", str(out), "--out", str(run), "--server-log", str(log)
    )
    assert code == 0, err
    table = pd.read_parquet(run / "requests.parquet")
    assert len(table) == COUNT and table["server_request_id"].notna().all()
    assert table["cached_tokens"].tolist() == table["server_cached_tokens"].tolist()
    assert table["cached_tokens"].tolist() == [0] + [32] * (COUNT - 1)
