#!/usr/bin/env bash
# Kernels as a user writes them: builds tools/nvcc-check/kernels.cu with this machine's nvcc for
# the GPU's SM (optimised, and as a debug build with -G), runs every kernel through `nvbare run`
# and checks what it left in its buffers (tools/nvcc-check/check.py); then checks that what
# must fail fails cleanly: a failed assert, grid.sync() without a cooperative launch and
# recursion deeper than the stack fault (as under CUDA); thread-block clusters, device-side
# printf and objects that need device linking are refused; the GPU stays usable. Needs an
# NVIDIA GPU with the nvidia driver, nvcc and python3.
#
# usage: tools/nvcc-check.sh [--device nvidia:N]
#
# Environment:
#   NVBARE  nvbare binary (default target/release/nvbare)
#   NVCC    nvcc (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   OUT     if set, everything printed is also appended to OUT, or OUT/nvcc-check.log when OUT
#           is a directory
#   STEP_TIMEOUT  wall-clock limit of each step in seconds (default 60)
#
# Every step prints PASS or FAIL; the exit status is non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

CHECK_NAME=nvcc-check
STEP_TIMEOUT="${STEP_TIMEOUT:-60}"
# shellcheck source=tools/lib/check.sh
. tools/lib/check.sh
check_log

device=nvidia:0
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:?--device needs a value}"; shift 2 ;;
        --device=*) device="${1#--device=}"; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "nvcc-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

NVBARE="${NVBARE:-target/release/nvbare}"
NVCC="${NVCC:-nvcc}"
if ! command -v "$NVCC" >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    NVCC=/usr/local/cuda/bin/nvcc
fi
src=tools/nvcc-check/kernels.cu
check=tools/nvcc-check/check.py

step "preflight"
echo "date:   $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "device: $device"
for need in "$NVBARE" "$NVCC" python3; do
    if ! command -v "$need" >/dev/null; then
        record "preflight" FAIL "$need not found (NVBARE / NVCC set the paths)"
        check_summary
    fi
done
"$NVCC" --version | tail -2
if ! run_logged info "$NVBARE" info --device "$device"; then
    record "nvbare info" FAIL "see output above"
    check_summary
fi
sm="$(sed -n 's/^sm *sm_\([0-9]*\).*/\1/p' "$work/info.out" | head -1)"
echo "sm:     sm_$sm"

# build NAME FLAGS...: $work/NAME.cubin from the source.
build() {
    local name="$1"; shift
    run_logged "build-$name" "$NVCC" -cubin -arch="sm_$sm" "$@" -o "$work/$name.cubin" "$src"
}

# run_check NAME CUBIN KERNEL: runs KERNEL with check.py's arguments and checks its buffers;
# records NAME.
run_check() {
    local name="$1" cubin="$2" k="$3" args save="$work/$1.save"
    mapfile -t args < <(python3 "$check" --args "$k")
    mkdir -p "$save"
    if run_logged "$name" "$NVBARE" run --device "$device" --timeout-ms 5000 "$cubin" "$k" \
        --save "$save" --print 4 "${args[@]}"; then
        if python3 "$check" "$k" "$save"; then
            record "$name" PASS
        else
            record "$name" FAIL "wrong results"
        fi
    else
        record "$name" FAIL "$(tail -1 "$work/$name.err" | cut -c1-160)"
    fi
}

# fails NAME PATTERN CUBIN KERNEL ARGS...: the run must fail (no hang) with an error matching
# PATTERN and no panic.
fails() {
    local name="$1" pattern="$2"; shift 2
    if run_logged "$name" "$NVBARE" run --device "$device" --timeout-ms 5000 "$@"; then
        record "$name" FAIL "it ran"
    elif grep -Eq "$pattern" "$work/$name.err" && ! grep -q "panicked" "$work/$name.err"; then
        record "$name" PASS
    else
        record "$name" FAIL "unexpected error: $(tail -1 "$work/$name.err" | cut -c1-120)"
    fi
}

# kernels every build must run right; clusters only where the SM has them.
kernels=(saxpy const_table tickets block_sum transpose local_stack deep math_f64 params_mixed
    bounded grid3d wmma_tile big_shared half_math warp_ops async_copy atomic_f64 checked
    _Z9templatedIjEvPT_S0_)
extra=()
[ "${sm:-0}" -ge 90 ] && extra=(-DWITH_CLUSTERS)

for variant in O3 G; do
    flags=(-O3)
    [ "$variant" = G ] && flags=(-G)
    step "build $src with nvcc ${flags[*]} ${extra[*]}"
    if ! build "$variant" "${flags[@]}" "${extra[@]}"; then
        record "nvcc ${flags[*]}" FAIL "nvcc failed"
        continue
    fi
    for k in "${kernels[@]}"; do
        step "$variant: $k"
        run_check "$variant $k" "$work/$variant.cubin" "$k"
    done
    c="$work/$variant.cubin"
    step "$variant: bounded with 256 threads (must be refused: __launch_bounds__(128))"
    fails "$variant bounded, 256 threads refused" "128" "$c" bounded --block 256 --arg buf:u32x256
    step "$variant: deep with the default 1 KiB stack (must fault: its recursion needs more)"
    fails "$variant deep recursion on the default stack faults" "faulted" "$c" deep --block 32 \
        --arg buf:u32x32 --arg u32:64
    step "$variant: checked with a 7 in its input (must fault: the assert fails)"
    fails "$variant failed assert faults" "faulted" "$c" checked --block 256 \
        --arg buf:u32x256=iota --arg u32:256
    step "$variant: grid_sync (must fault: grid.sync() traps without a cooperative launch)"
    fails "$variant grid.sync() without a cooperative launch faults" "faulted" "$c" grid_sync \
        --grid 4 --block 32 --arg buf:u32x4
    if [ "${sm:-0}" -ge 90 ]; then
        step "$variant: clustered (must be refused: nvbare does not launch clusters)"
        fails "$variant __cluster_dims__ refused" "cluster" "$c" clustered --grid 4 --block 32 \
            --arg buf:u32x4
    fi
done

# refused NAME PATTERN FLAGS...: a build of the source that nvbare must refuse to load, with an
# error matching PATTERN; the GPU must still run a kernel afterwards.
refused() {
    local name="$1" pattern="$2"; shift 2
    step "$name (must be refused)"
    if ! build "$name" "$@"; then
        record "$name refused" FAIL "nvcc failed"
        return
    fi
    if run_logged "$name-run" "$NVBARE" run --device "$device" "$work/$name.cubin" saxpy \
        --arg f32:1 --arg buf:f32x4 --arg buf:f32x4 --arg u32:4; then
        record "$name refused" FAIL "it loaded"
    elif grep -Eq "$pattern" "$work/$name-run.err" && ! grep -q "panicked" "$work/$name-run.err"; then
        record "$name refused" PASS
    else
        record "$name refused" FAIL "unclear error"
    fi
}
refused printf "printf" -O3 -DWITH_PRINTF
refused rdc "nvlink" -O3 -rdc=true

step "a __managed__ variable"
if build managed -O3 -DWITH_MANAGED; then
    run_check "managed variable" "$work/managed.cubin" with_managed
else
    record "managed variable" FAIL "nvcc failed"
fi

step "the GPU is still usable"
run_check "GPU usable afterwards" "$work/O3.cubin" saxpy

check_summary
