#!/usr/bin/env bash
# The field's load generators in environments of their own (their pins are not the project's):
# aiperf 0.13.0 in .venv-clients, guidellm 0.8.1 in .venv-guidellm, inference-perf 0.7.0 in
# .venv-inference-perf (Python 3.12), and SmolLM2's tokenizer as an offline hub-cache entry for it
# (.venv-clients/hf, scripts/client_tokenizer.py). .ci/run builds them; their live tests
# (tests/live/test_*_client*.py, test_aiperf_replay.py) skip without them, and fail under CI=true.
# Needs .venv (scripts/setup.sh) for the tokenizer. docs/interop.md §6.
# The clients' own packages are installed with uv (pinned below): pip took 640 s for the three
# at a load average of 10-13 on this 2-core machine, uv about a tenth of it; torch's CPU build
# still comes through pip's configured sources (scripts/torch_build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-clients/bin/python ] || "$PY" -m venv .venv-clients
.venv-clients/bin/python -m pip install -q "uv==0.13.9"
UV=.venv-clients/bin/uv
$UV pip install -q --python .venv-clients/bin/python "aiperf==0.13.0"
[ -x .venv-guidellm/bin/python ] || "$PY" -m venv .venv-guidellm
# guidellm requires torch (unpinned): without a CUDA device its CPU build first, as setup.sh does,
# instead of the default CUDA build's ~6 GB of nvidia-* packages.
VPY=.venv-guidellm/bin/python VPIP=".venv-guidellm/bin/python -m pip" LABEL=setup_clients
TORCH="torch==2.13.0" CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
# shellcheck source=scripts/torch_build.sh
source scripts/torch_build.sh
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    "$VPY" -c "import torch" 2>/dev/null || install_cpu_torch
fi
$UV pip install -q --python .venv-guidellm/bin/python "guidellm==0.8.1"
# inference-perf 0.7.0 requires Python >= 3.12. A pyenv shim is on the PATH even where it cannot
# run the version it names, so the interpreter is asked to run, not just looked up.
IP_PY=${INFERENCE_PERF_PYTHON:-python3.12}
if ! "$IP_PY" -c "" >/dev/null 2>&1 && command -v pyenv >/dev/null 2>&1; then
    for v in "$(pyenv root)"/versions/3.1[2-9]*/bin/python3; do
        if "$v" -c "" >/dev/null 2>&1; then IP_PY=$v; break; fi
    done
fi
if "$IP_PY" -c "" >/dev/null 2>&1; then
    [ -x .venv-inference-perf/bin/python ] || "$IP_PY" -m venv .venv-inference-perf
    $UV pip install -q --python .venv-inference-perf/bin/python "inference-perf==0.7.0"
else
    echo "setup_clients: no $IP_PY; inference-perf (Python >= 3.12) skipped" >&2
fi
.venv/bin/python scripts/client_tokenizer.py .venv-clients/hf
echo "prefixbench: .venv-clients (aiperf $(.venv-clients/bin/aiperf --version)) and .venv-guidellm ready"
