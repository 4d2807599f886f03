#!/usr/bin/env bash
# Hardware check of two GPUs in one process (issue #10), for a machine with two NVIDIA GPUs and
# the nvidia driver (r580) plus the CUDA toolkit: prints the topology, runs nvbare's two-GPU
# checks (copies both ways with verification, pushed and pulled, a cross-device semaphore, an
# event ordering a peer read), in both A/B orders, then the peer copy bandwidth table against
# CUDA's cudaMemcpyPeer (tools/bench/compare_p2p.sh), and the same bandwidth pulled by the
# destination's copy engine.
#
# usage: tools/p2p-check.sh [--devices nvidia:A,nvidia:B] [--size 1G] [--reps 10]
#
# Environment:
#   NVBARE  nvbare binary (default target/release/nvbare; build: cargo build --release -p nvbare-tools)
#   OUT     if set, everything printed is also appended to a log: OUT itself, or OUT/p2p-check.log
#           when OUT is a directory (the benchmark JSON then goes to OUT/bench too)
#   NVCC    for the CUDA baseline (default nvcc; see tools/bench/compare_p2p.sh)
#   STEP_TIMEOUT  wall-clock limit of each nvbare step in seconds (default 900)
#
# Every step prints PASS, FAIL or SKIP and the script goes on after a failure; the exit status is
# non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

CHECK_NAME=p2p-check
STEP_TIMEOUT="${STEP_TIMEOUT:-900}"
# shellcheck source=tools/lib/check.sh
. tools/lib/check.sh
check_log

devices=nvidia:0,nvidia:1
size=1G
reps=10
while [ $# -gt 0 ]; do
    case "$1" in
        --devices) devices="${2:?--devices needs a value}"; shift 2 ;;
        --devices=*) devices="${1#--devices=}"; shift ;;
        --size) size="${2:?--size needs a value}"; shift 2 ;;
        --size=*) size="${1#--size=}"; shift ;;
        --reps) reps="${2:?--reps needs a value}"; shift 2 ;;
        --reps=*) reps="${1#--reps=}"; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "p2p-check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$devices" in
    *,*) ;;
    *) echo "p2p-check.sh: --devices needs two devices, A,B" >&2; exit 2 ;;
esac
a="${devices%%,*}"; b="${devices#*,}"

NVBARE="${NVBARE:-target/release/nvbare}"
export NVBARE

step "preflight"
echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "host:    $(uname -n) $(uname -r)"
echo "devices: $a (A), $b (B)"
echo "nvbare:  $NVBARE"
if [ -r /proc/driver/nvidia/version ]; then head -1 /proc/driver/nvidia/version; else echo "no /proc/driver/nvidia/version"; fi
command -v nvcc >/dev/null && nvcc --version | tail -2
if [ ! -x "$NVBARE" ]; then
    record "nvbare binary" FAIL "$NVBARE missing; cargo build --release -p nvbare-tools"
    printf '\n%s\n' "${results[@]}"
    exit 1
fi

step "topology: nvidia-smi topo -m (and P2P read/write/NVLink matrices)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L
    if nvidia-smi topo -m; then record "nvidia-smi topo -m" PASS; else record "nvidia-smi topo -m" FAIL; fi
    for m in r w n; do
        echo "-- nvidia-smi topo -p2p $m"
        nvidia-smi topo -p2p "$m" || true
    done
else
    record "nvidia-smi topo -m" SKIP "nvidia-smi not found"
fi

for d in "$a" "$b"; do
    step "info: nvbare info --device $d"
    if run_logged "info-${d//:/_}" "$NVBARE" info --device "$d"; then
        record "info $d" PASS
    else
        record "info $d" FAIL "see output above"
    fi
done

# The checks print one PASS/FAIL line each; the command fails if any check failed.
checks() { # checks NAME DEVICES
    local name="$1" devs="$2"
    step "two-GPU checks, A,B = $devs: nvbare bench p2p --devices $devs --checks-only"
    run_logged "$name" "$NVBARE" bench p2p --devices "$devs" --checks-only
    local rc=$?
    local passes fails
    passes=$(grep -c '^  PASS' "$work/$name.out")
    fails=$(grep -c '^  FAIL' "$work/$name.out")
    if [ $rc -eq 0 ] && [ "$fails" -eq 0 ] && [ "$passes" -ge 3 ]; then
        record "checks $devs (copies both ways verified, semaphore, event)" PASS "$passes passed"
    else
        record "checks $devs (copies both ways verified, semaphore, event)" FAIL \
            "exit $rc, $passes passed, $fails failed"
    fi
}
checks checks-ab "$a,$b"
checks checks-ba "$b,$a"

step "bandwidth against CUDA cudaMemcpyPeer ($size, $reps copies per direction)"
if tools/bench/compare_p2p.sh --devices "$a,$b" --size "$size" --reps "$reps"; then
    record "peer copy bandwidth table vs CUDA (data verified both sides)" PASS
else
    record "peer copy bandwidth table vs CUDA (data verified both sides)" FAIL "see the table and logs above"
fi

step "bandwidth pulled by the destination's copy engine: nvbare bench p2p --engine dst"
if run_logged pull "$NVBARE" bench p2p --devices "$a,$b" --size "$size" --reps "$reps" --engine dst; then
    record "peer copy bandwidth, pull" PASS
else
    record "peer copy bandwidth, pull" FAIL
fi

check_summary
