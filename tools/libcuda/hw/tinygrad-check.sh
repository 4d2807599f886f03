#!/usr/bin/env bash
# tinygrad's own tests with DEV=CUDA, once on NVIDIA's libcuda.so.1 and once on ours (over
# NVBARE_DEVICE=nvidia:0), then the outcomes side by side (junit_compare.py), and tinygrad's
# speed (tinygrad_speed.py) on both. Run from the repository root on a machine with an NVIDIA GPU,
# its driver and the CUDA toolkit (tinygrad's CUDA compiler uses the toolkit's nvrtc).
#
# usage: tools/libcuda/hw/tinygrad-check.sh PATH/TO/libcuda.so TINYGRAD_CHECKOUT OUTDIR [TESTFILE...]
#   TINYGRAD_CHECKOUT: a directory with tinygrad's test/ (its repository at the installed version)
#   TESTFILE: relative to it; default test/test_tiny.py
# environment: PYTHON (one with tinygrad, pytest, pytest-xdist, pytest-timeout, hypothesis and
#   torch; default python3), JOBS (pytest -n, default 8), TEST_TIMEOUT (s per test, default 120),
#   FILE_TIMEOUT (s per test file and library, default 300), SPEED_STEPS (default 500; 0 skips),
#   CC (tinygrad's CPU device compiles its reference kernels with it: clang, not gcc).
set -u
SO=$(realpath "$1")
TG=$(realpath "$2")
OUTDIR=$3
shift 3
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test/test_tiny.py)
PYTHON=${PYTHON:-python3}
JOBS=${JOBS:-8}
TEST_TIMEOUT=${TEST_TIMEOUT:-120}
FILE_TIMEOUT=${FILE_TIMEOUT:-300}
SPEED_STEPS=${SPEED_STEPS:-500}
CUDA=${CUDA_HOME:-/usr/local/cuda}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
OUTDIR=$(realpath "$OUTDIR")
W=$(mktemp -d)
ln -sf "$SO" "$W/libcuda.so.1"
ln -sf "$SO" "$W/libcuda.so"
S=$OUTDIR/summary.txt
log() { echo "== $*" | tee -a "$S"; }

# One environment per library; both find nvrtc in the toolkit.
with_lib() {
    local lib=$1; shift
    if [ "$lib" = nvbare ]; then
        LD_LIBRARY_PATH="$W:$CUDA/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVBARE_DEVICE=nvidia:0 DEV=CUDA "$@"
    else
        LD_LIBRARY_PATH="$CUDA/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DEV=CUDA "$@"
    fi
}

# Which libcuda the process really mapped, so a run on the wrong library cannot pass unnoticed.
probe='from tinygrad import Device, Tensor
t = (Tensor([1.0, 2.0], device="CUDA") + 1).tolist()
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda" in l})
print("CUDA", Device["CUDA"].arch, t, libs)'
for lib in nvidia nvbare; do
    log "$lib: probe"
    (cd "$TG" && with_lib $lib timeout 120 "$PYTHON" -c "$probe") 2>&1 | tail -3 | tee -a "$S"
done

for t in "${tests[@]}"; do
    name=$(echo "$t" | tr '/' '_' | sed 's/\.py$//')
    for lib in nvidia nvbare; do
        log "$lib: $t"
        start=$(date +%s)
        (cd "$TG" && with_lib $lib timeout -k 10 "$FILE_TIMEOUT" "$PYTHON" -m pytest "$t" -q -n "$JOBS" \
            -p no:cacheprovider --timeout "$TEST_TIMEOUT" --junitxml "$OUTDIR/$name.$lib.xml" \
            >"$OUTDIR/$name.$lib.log" 2>&1)
        echo "rc=$? in $(( $(date +%s) - start )) s: $(tail -1 "$OUTDIR/$name.$lib.log" | cut -c1-200)" | tee -a "$S"
    done
    log "$t: NVIDIA's library against ours"
    "$PYTHON" "$HERE/junit_compare.py" "$OUTDIR/$name.nvidia.xml" "$OUTDIR/$name.nvbare.xml" \
        | tee "$OUTDIR/$name.compare.txt" | head -60 | tee -a "$S"
done

if [ "$SPEED_STEPS" != 0 ]; then
    for lib in nvidia nvbare; do
        log "$lib: tinygrad_speed.py $SPEED_STEPS"
        (cd "$TG" && with_lib $lib timeout 240 "$PYTHON" "$HERE/tinygrad_speed.py" "$SPEED_STEPS") \
            >"$OUTDIR/speed.$lib.json" 2>"$OUTDIR/speed.$lib.err"
        echo "rc=$?" | tee -a "$S"
        tail -c 600 "$OUTDIR/speed.$lib.json" | tee -a "$S"
        tail -3 "$OUTDIR/speed.$lib.err" | cut -c1-300 >>"$S"
    done
fi
rm -rf "$W"
