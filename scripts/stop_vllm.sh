#!/usr/bin/env bash
# Stops the server scripts/start_vllm.sh started (its PID is in .cache/vllm.pid).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" -m harness.live_server.launch stop "$@"
