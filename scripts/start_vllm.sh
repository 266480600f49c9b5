#!/usr/bin/env bash
# Starts the local vLLM server (scripts/setup_vllm.sh) on 127.0.0.1 and waits for /health.
#   bash scripts/start_vllm.sh [--port 8421 | --port 0] [--kv-events ipc://PATH] [--max-model-len 4096] [--num-gpu-blocks N] [--cpus 0] [--eager]
# A busy port is refused (exit 2). Its PID, port and nonce go to .cache/vllm.pid; stop it with `bash scripts/stop_vllm.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" -m harness.live_server.launch start "$@"
