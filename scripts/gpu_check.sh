#!/usr/bin/env bash
# The device check (docs/performance.md §3), self-contained, about 7 minutes on one H100/H200:
#   env     GPU, driver, Python, torch, Triton
#   deps    installs what the image lacks from a wheels folder (scripts/gpu_wheels.sh fills one)
#   ext     builds the two APC C extensions with gcc against this interpreter
#   tests   the gpu-marked tests of every test file that has some (attention, decode, model, ...)
#   bench   scripts/bench_attention.py --sweep at page 1 and page 16
#   e2e     scripts/gpu_table.py: the 8B-shape runs, each beside executor=simulated
#   claim1  claim 1's 0%-hit ABBA pairs (scripts/gpu_claim1.py), prefill- and decode-heavy
# Everything lands in one folder (--out, default results/gpu_check-<UTC time>): one log per stage,
# stages.tsv (exit code and seconds of each) and SUMMARY.md. --dry-run runs every stage's command
# on this CPU with tiny shapes (interpreted Triton, model=tiny), for tests and before a GPU session.
# Usage: scripts/gpu_check.sh [--dry-run] [--out DIR] [--wheels DIR]
# Env: PYTHON (default python3), GPU_CHECK_TOTAL_S (420: the e2e stage gets what is left of it),
#      GPU_CHECK_E2E_LIMIT (only the first N table rows), GPU_CHECK_TESTS_K (a -k filter, dry run),
#      GPU_CHECK_STAGES (a comma list of the stages to run; default all, in the order above).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
DRY=0
OUT=""
WHEELS=${GPU_CHECK_WHEELS:-wheels}
ALL_STAGES=env,deps,ext,tests,bench_page1,bench_page16,e2e,claim1
# Bad input is one line and exit 2, before anything is made or run.
refuse() { echo "gpu_check.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --out|--wheels)
            [ $# -ge 2 ] && [ -n "$2" ] && [[ "$2" != -* ]] \
                || refuse "$1 needs a folder (usage: [--dry-run] [--out DIR] [--wheels DIR])"
            if [ "$1" = --out ]; then OUT=$2; else WHEELS=$2; fi
            shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) refuse "unknown argument '$1' (valid: --dry-run, --out DIR, --wheels DIR)" ;;
    esac
    shift
done
positive() {  # NAME VALUE: a whole number of at least 1
    [[ "$2" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || refuse "$1 must be a whole number >= 1, got '$2'"
}
TOTAL_S=${GPU_CHECK_TOTAL_S:-420}
positive GPU_CHECK_TOTAL_S "$TOTAL_S"
[ -z "${GPU_CHECK_E2E_LIMIT:-}" ] || positive GPU_CHECK_E2E_LIMIT "$GPU_CHECK_E2E_LIMIT"
IFS=, read -r -a chosen <<< "${GPU_CHECK_STAGES:-$ALL_STAGES}"
[ "${#chosen[@]}" -gt 0 ] || refuse "GPU_CHECK_STAGES names no stage (valid: $ALL_STAGES)"
for stage in "${chosen[@]}"; do
    [[ ",$ALL_STAGES," == *",$stage,"* ]] || refuse "unknown stage '$stage' in GPU_CHECK_STAGES (valid: $ALL_STAGES)"
done
OUT=${OUT:-results/gpu_check-$(date -u +%Y%m%d-%H%M%S)}
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then refuse "--out $OUT exists and is not a folder"; fi
mkdir -p "$OUT" 2>/dev/null || refuse "--out $OUT: cannot create the folder"
OUT=$(cd "$OUT" && pwd) || refuse "--out $OUT: cannot enter the folder"
START=$(date +%s)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ "$DRY" = 1 ]; then
    export CUDA_VISIBLE_DEVICES="" TRITON_INTERPRET=1
fi
status=0
printf 'stage\texit\tseconds\n' > "$OUT/stages.tsv"

# run_stage NAME CMD...: the command's output into $OUT/NAME.txt (then shown), its exit code
# recorded. No pipe: a stage runs in this shell, so what it exports (PYTHONPATH) holds after it.
run_stage() {
    local name=$1
    shift
    local t0 rc
    t0=$(date +%s)
    echo "== $name: $*" > "$OUT/$name.txt"
    "$@" >> "$OUT/$name.txt" 2>&1
    rc=$?
    cat "$OUT/$name.txt"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" >> "$OUT/stages.tsv"
    [ "$rc" -eq 0 ] || status=1
    return 0
}

stage_env() {
    if command -v nvidia-smi > /dev/null && [ "$DRY" = 0 ]; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
    else
        echo "no nvidia-smi (or dry run)"
    fi
    $PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
    $PY -c "import triton; print('triton', triton.__version__)" || true
    git -C "$ROOT" log -1 --format='commit %H %s' 2>/dev/null || true
}

stage_deps() {
    local missing
    missing=$($PY -c "import importlib.util as u; print(' '.join(m for m in ('hydra', 'omegaconf', 'antlr4', 'cbor2', 'datasets', 'dill', 'multiprocess') if u.find_spec(m) is None))")
    echo "missing: ${missing:-none}"
    if ! ls "$WHEELS"/*.whl > /dev/null 2>&1; then
        [ -z "$missing" ] && { echo "nothing to install"; return 0; }
        echo "no wheels in '$WHEELS': fill it with scripts/gpu_wheels.sh on a machine with network" >&2
        return 1
    fi
    # --target: nothing in the image changes; the folder goes first on PYTHONPATH only if needed.
    local target=()  # a dry run on another Python installs the GPU image's wheels as they are
    [ "$DRY" = 1 ] && target=(--python-version 3.12 --implementation cp --only-binary=:all:
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64)
    $PY -m pip install -q --no-index --no-deps "${target[@]}" --target "$OUT/site" "$WHEELS"/*.whl \
        || return 1
    ls "$OUT/site"
    if [ -n "$missing" ]; then
        export PYTHONPATH="$OUT/site:$PYTHONPATH"
        $PY -c "import hydra, omegaconf, cbor2, datasets; print('deps ok: hydra', hydra.__version__)"
    fi
}

stage_ext() {
    local inc suffix dest
    inc=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
    suffix=$($PY -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
    # A dry run builds beside the outputs only (this checkout has its own build); a GPU run
    # builds into the package, where engines.cache.apc imports them.
    dest=engines/cache/apc
    [ "$DRY" = 1 ] && dest="$OUT/ext" && mkdir -p "$dest"
    gcc -O2 -shared -fPIC -I"$inc" engines/cache/apc/_pickle_chain.c -lcrypto -o "$dest/_pickle_chain$suffix" || return 1
    gcc -O2 -shared -fPIC -I"$inc" engines/cache/apc/_pool_loops.c -o "$dest/_pool_loops$suffix" || return 1
    $PY - "$dest" "$suffix" <<'PYEOF'
import importlib.util, sys
dest, suffix = sys.argv[1:]
for name in ("_pickle_chain", "_pool_loops"):
    spec = importlib.util.spec_from_file_location(f"engines.cache.apc.{name}", f"{dest}/{name}{suffix}")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print("built and imported", name)
PYEOF
}

stage_tests() {
    local files
    files=$(grep -l "pytest.mark.gpu" tests/test_*.py | tr '\n' ' ')
    echo "files with gpu tests: $files"
    if [ "$DRY" = 1 ]; then
        # Collect the gpu tests (their imports and parameters), run the decode kernel's CPU
        # tests under the interpreter.
        $PY -m pytest -o addopts="" -p no:cacheprovider -q --co -m gpu $files | tail -3 || return 1
        timeout 300 $PY -m pytest -o addopts="" -p no:cacheprovider -q -m "not gpu" \
            tests/unit/test_attention_decode.py -k "${GPU_CHECK_TESTS_K:-gqa4 and splits3}"
    else
        timeout 240 $PY -m pytest -o addopts="" -p no:cacheprovider -q -m gpu $files
    fi
}

stage_bench() {
    local page=$1 dry=()
    [ "$DRY" = 1 ] && dry=(--dry-run)
    timeout 180 $PY scripts/bench_attention.py --block-size "$page" --sweep "${dry[@]}" \
        --json "$OUT/bench_attention_page$page.json"
}

stage_e2e() {
    local left extra=()
    left=$((TOTAL_S - ($(date +%s) - START) - 90))
    [ "$left" -lt 60 ] && left=60
    [ "$DRY" = 1 ] && extra+=(--dry-run)
    [ -n "${GPU_CHECK_E2E_LIMIT:-}" ] && extra+=(--limit "$GPU_CHECK_E2E_LIMIT")
    echo "budget: real runs start within ${left} s"
    $PY scripts/gpu_table.py --out "$OUT/e2e" --budget-s "$left" --run-timeout-s 120 "${extra[@]}"
}

# ---------------------------------------------------------------------------------------------
# claim 1's 0%-hit ABBA pairs on the 8B shape (docs/claims.md §5): 6 pairs per design, prefill-
# heavy and decode-heavy; about 5 minutes on an H200, so run it in its own call when the e2e stage
# took the budget (GPU_CHECK_STAGES=deps,ext,claim1).
stage_claim1() {
    local extra=()
    [ "$DRY" = 1 ] && extra+=(--dry-run --pairs 3)
    timeout 420 $PY scripts/gpu_claim1.py --out "$OUT/claim1" "${extra[@]}"
}
# ---------------------------------------------------------------------------------------------

STAGES=",${GPU_CHECK_STAGES:-$ALL_STAGES},"
want() { [[ "$STAGES" == *",$1,"* ]]; }
want env && run_stage env stage_env
want deps && run_stage deps stage_deps
want ext && run_stage ext stage_ext
want tests && run_stage tests stage_tests
want bench_page1 && run_stage bench_page1 stage_bench 1
want bench_page16 && run_stage bench_page16 stage_bench 16
want e2e && run_stage e2e stage_e2e
want claim1 && run_stage claim1 stage_claim1

{
    echo "# GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ)$([ "$DRY" = 1 ] && echo ' (DRY RUN on CPU: tiny shapes, the figures mean nothing)')"
    echo
    echo '```'
    column -t "$OUT/stages.tsv" 2>/dev/null || cat "$OUT/stages.tsv"
    echo '```'
    echo
    for page in 1 16; do
        echo "## bench_attention page $page"
        echo '```'
        sed -n '/^summary/,/^{/p' "$OUT/bench_page$page.txt" 2>/dev/null | grep -v '^{'
        echo '```'
    done
    echo
    cat "$OUT/e2e/table.md" 2>/dev/null || echo "(no e2e table)"
    echo
    echo "## claim 1: 0%-hit on/off pairs"
    cat "$OUT/claim1/claim1.md" 2>/dev/null || echo "(no claim 1 table)"
} > "$OUT/SUMMARY.md"
cat "$OUT/SUMMARY.md"
echo "gpu_check: exit $status, $(($(date +%s) - START)) s (outputs in $OUT)"
exit $status
