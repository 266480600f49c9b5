#!/usr/bin/env bash
# Creates .venv-routers with the two real routers a server-target fleet drives (docs/fleet.md §5):
# sglang-router 0.3.2 and vllm-router 0.1.17, binary wheels from PyPI (Rust cores). A venv of their
# own keeps their dependencies out of the project's; the harness finds them there, or wherever
# PREFIXBENCH_ROUTERS_VENV points.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${PREFIXBENCH_ROUTERS_VENV:-.venv-routers}
if [ "${1:-}" = "--fresh" ]; then rm -rf "$VENV"; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "sglang-router==0.3.2" "vllm-router==0.1.17"
echo "prefixbench: routers ready in $VENV"
