#!/usr/bin/env bash
# The field's load generators in environments of their own (their pins are not the project's):
# aiperf 0.13.0 in .venv-clients, guidellm 0.8.1 in .venv-guidellm, inference-perf 0.7.0 in
# .venv-inference-perf (Python 3.12), and SmolLM2's tokenizer as an offline hub-cache entry for it
# (.venv-clients/hf, scripts/client_tokenizer.py). Opt-in: tests/live/test_aiperf_replay.py skips
# without it, CI too. Needs .venv (scripts/setup.sh) for the tokenizer. docs/interop.md §6.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv-clients/bin/python ] || "$PY" -m venv .venv-clients
.venv-clients/bin/python -m pip install -q --upgrade pip
.venv-clients/bin/python -m pip install -q "aiperf==0.13.0"
[ -x .venv-guidellm/bin/python ] || "$PY" -m venv .venv-guidellm
.venv-guidellm/bin/python -m pip install -q --upgrade pip
.venv-guidellm/bin/python -m pip install -q "guidellm==0.8.1"
# inference-perf 0.7.0 requires Python >= 3.12
IP_PY=${INFERENCE_PERF_PYTHON:-python3.12}
if command -v "$IP_PY" >/dev/null 2>&1; then
    [ -x .venv-inference-perf/bin/python ] || "$IP_PY" -m venv .venv-inference-perf
    .venv-inference-perf/bin/python -m pip install -q --upgrade pip
    .venv-inference-perf/bin/python -m pip install -q "inference-perf==0.7.0"
else
    echo "setup_clients: no $IP_PY; inference-perf (Python >= 3.12) skipped" >&2
fi
.venv/bin/python scripts/client_tokenizer.py .venv-clients/hf
echo "prefixbench: .venv-clients (aiperf $(.venv-clients/bin/aiperf --version)) and .venv-guidellm ready"
