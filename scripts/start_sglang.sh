#!/usr/bin/env bash
# Starts the local SGLang server (scripts/setup_sglang.sh) on 127.0.0.1 and waits for /health.
#   bash scripts/start_sglang.sh [PORT] [SGLANG_FLAG...]   (default 30000, 0 picks a free one; max 600 s)
# Flags after PORT go to sglang.launch_server as given, e.g. --disable-overlap-schedule (SGLang's
# overlap loop is on by default, on CPU too; the harness reads which from /get_server_info).
# A port already in use is refused (one line, exit 2): it never reports another process's
# server as its own. It serves `llama-rand-smollm2-<nonce>`; .cache/sglang.pid holds its PID and
# .cache/sglang.state its port and nonce (pass `server.expect_nonce=<nonce>` to the harness,
# and `server.model_preset=smollm2-rand`, the preset of its shape and tokenizer, for the report);
# the log goes to .cache/sglang.log. Stop it with `kill "$(cat .cache/sglang.pid)"`. The cache is SGLang's radix tree at page size 1 with
# SGLANG_MAX_TOTAL_TOKENS KV tokens (default 65536), which the harness reads from /get_server_info
# with the page size and scheduling limits (docs/servers.md §2.3).
# SGLANG_USE_CPU_ENGINE=1 selects SGLang's CPU code paths; torch_native attention and the
# pytorch sampler keep every kernel in torch (the placeholder sgl_kernel is never called).
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-30000}
shift $(( $# > 0 ? 1 : 0 ))  # the rest are SGLang's own flags
VENV=.venv-sglang
[ -x "$VENV/bin/python" ] || { echo "error: $VENV is missing; run bash scripts/setup_sglang.sh" >&2; exit 2; }
case "$PORT" in ''|*[!0-9]*) echo "error: PORT '$PORT': expected 0 (pick a free one) or 1-65535" >&2; exit 2;; esac
PORT=$("$VENV/bin/python" - "$PORT" <<'PY'
import socket, sys
port = int(sys.argv[1])
if port == 0:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); sys.exit(0)
with socket.socket() as s:
    s.settimeout(0.5)
    busy = s.connect_ex(("127.0.0.1", port)) == 0
if not busy:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            busy = True
if busy:
    print(f"error: port {port} on 127.0.0.1 is already in use by another process; pass a free PORT, or 0", file=sys.stderr)
    sys.exit(2)
print(port)
PY
) || exit 2
NONCE=n$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')  # "n": Hydra keeps it a string (launch.py new_nonce)
mkdir -p .cache
env -u VIRTUAL_ENV SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  "$VENV/bin/python" -m sglang.launch_server \
  --model-path .models/llama-rand-smollm2 --served-model-name "llama-rand-smollm2-$NONCE" \
  --host 127.0.0.1 --port "$PORT" --device cpu --attention-backend torch_native \
  --sampling-backend pytorch --grammar-backend none --disable-cuda-graph \
  --page-size 1 --max-total-tokens "${SGLANG_MAX_TOTAL_TOKENS:-65536}" \
  --enable-cache-report --enable-metrics "$@" >.cache/sglang.log 2>&1 &
echo $! >.cache/sglang.pid
printf '{"pid": %s, "port": %s, "nonce": "%s"}\n' "$!" "$PORT" "$NONCE" >.cache/sglang.state
for _ in $(seq 1 600); do
  if curl -sf -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "http://127.0.0.1:$PORT server.expect_nonce=$NONCE server.model_preset=smollm2-rand"; exit 0
  fi
  kill -0 "$(cat .cache/sglang.pid)" 2>/dev/null || { echo "error: SGLang exited; see .cache/sglang.log" >&2; exit 1; }
  sleep 1
done
echo "error: SGLang did not become healthy in 600 s; see .cache/sglang.log" >&2; exit 1
