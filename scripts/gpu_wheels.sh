#!/usr/bin/env bash
# Fills a wheels folder for scripts/gpu_check.sh on a machine with network (any OS/CPU): the
# packages the GPU image lacks (hydra-core, omegaconf, antlr4-python3-runtime, cbor2, datasets,
# dill, multiprocess), as binary wheels for CPython 3.12 on manylinux x86_64, without their
# dependencies (the image has numpy, pandas, pyarrow, fsspec, huggingface-hub, pyyaml, ...).
# antlr4-python3-runtime 4.9.3 ships only an sdist: it is built into a pure-Python wheel here.
# Usage: scripts/gpu_wheels.sh [DIR]   (default: wheels/, gitignored by `*.whl`... copy it along)
set -euo pipefail
DIR=${1:-wheels}
PY=${PYTHON:-python3}
mkdir -p "$DIR"
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR" \
    "hydra-core==1.3.2" "omegaconf==2.3.0" "cbor2>=5.4" "datasets>=2.18" dill multiprocess
$PY -m pip wheel -q --no-deps --no-binary=:all: -w "$DIR" "antlr4-python3-runtime==4.9.3"
ls -1 "$DIR"
