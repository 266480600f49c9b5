#!/usr/bin/env bash
# Starts the local SGLang server (scripts/setup_sglang.sh) on 127.0.0.1 and waits for /health.
#   bash scripts/start_sglang.sh [PORT]        (default 30000; max 600 s to become healthy)
# Its PID goes to .cache/sglang.pid and its log to .cache/sglang.log; stop it with
# `kill "$(cat .cache/sglang.pid)"`. The cache is SGLang's radix tree at page size 1 with
# SGLANG_MAX_TOTAL_TOKENS KV tokens (default 65536): the twin's `server.kv_capacity_tokens`.
# SGLANG_USE_CPU_ENGINE=1 selects SGLang's CPU code paths; torch_native attention and the
# pytorch sampler keep every kernel in torch (the placeholder sgl_kernel is never called).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-30000}
VENV=.venv-sglang
[ -x "$VENV/bin/python" ] || { echo "error: $VENV is missing; run bash scripts/setup_sglang.sh" >&2; exit 2; }
mkdir -p .cache
env -u VIRTUAL_ENV SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$VENV/bin/python" -m sglang.launch_server \
  --model-path .models/llama-rand-smollm2 --served-model-name llama-rand-smollm2 \
  --host 127.0.0.1 --port "$PORT" --device cpu --attention-backend torch_native \
  --sampling-backend pytorch --grammar-backend none --disable-cuda-graph \
  --page-size 1 --max-total-tokens "${SGLANG_MAX_TOTAL_TOKENS:-65536}" \
  --enable-cache-report --enable-metrics >.cache/sglang.log 2>&1 &
echo $! >.cache/sglang.pid
for _ in $(seq 1 600); do
  if curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "http://127.0.0.1:$PORT"; exit 0
  fi
  kill -0 "$(cat .cache/sglang.pid)" 2>/dev/null || { echo "error: SGLang exited; see .cache/sglang.log" >&2; exit 1; }
  sleep 1
done
echo "error: SGLang did not become healthy in 600 s; see .cache/sglang.log" >&2; exit 1
