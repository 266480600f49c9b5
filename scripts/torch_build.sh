# Sourced by scripts/setup.sh and scripts/setup_vllm.sh: install torch's CPU build, and say which
# build was installed. Needs VPIP (the venv's "python -m pip"), VPY (its python), TORCH (the pin)
# and CPU_INDEX (the PyTorch CPU index) set, and LABEL (the prefix of each message).
#
# Which build pip would install is asked of pip itself (a dry run that honours its configured
# indexes, find-links, proxies and mirrors), never guessed from whether one URL answers: pip's
# own sources may already hold the CPU build, and the CPU index may answer through pip's proxy
# only. Every message about the build is checked against what was installed.

# torch_build SPEC [PIP ARGS...]: "cpu" or "cuda", the build pip would pick; "" if none resolves.
torch_build() {
    local spec=$1
    shift
    $VPIP install --dry-run --no-deps --ignore-installed -q --report - --timeout 15 --retries 0 \
        "$spec" "$@" 2>/dev/null | "$VPY" -c '
import json, sys
try:
    meta = json.load(sys.stdin)["install"][0]["metadata"]
except (ValueError, KeyError, IndexError):
    sys.exit(0)
deps = meta.get("requires_dist") or []
cuda = "+cu" in meta["version"] or any(d.lower().startswith("nvidia-") for d in deps)
print("cuda" if cuda else "cpu")' || true
}

# installed_build: "CPU" or "CUDA x.y", the torch in the venv.
installed_build() {
    "$VPY" -W ignore -c "import torch; print('CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU')" 2>/dev/null
}

# install_cpu_torch: the CPU build from pip's own sources when they hold it, else from CPU_INDEX,
# else (neither resolves one) the default build with a warning; then the build installed.
install_cpu_torch() {
    if [ "$(torch_build "$TORCH")" = cpu ]; then
        echo "$LABEL: torch's CPU build from pip's configured sources"
        $VPIP install -q "$TORCH"
    elif [ "$(torch_build "$TORCH" --index-url "$CPU_INDEX")" = cpu ]; then
        echo "$LABEL: torch's CPU build from $CPU_INDEX"
        $VPIP install -q "$TORCH" --index-url "$CPU_INDEX"
    else
        echo "$LABEL: warning: neither pip's sources nor $CPU_INDEX offer $TORCH's CPU build;" >&2
        echo "$LABEL: installing the default build (set TORCH_CPU_INDEX to a reachable mirror)." >&2
        $VPIP install -q "$TORCH"
    fi
    local build
    build=$(installed_build)
    echo "$LABEL: installed torch $("$VPY" -W ignore -c 'import torch; print(torch.__version__)' 2>/dev/null) ($build build)"
    if [ "$build" != CPU ]; then
        echo "$LABEL: warning: this is the $build build (~6 GB of nvidia-* packages), not the CPU one" >&2
    fi
}
