#!/usr/bin/env bash
# Two processes on one GPU, many times (issue #4): a process busy with launch + sync round trips,
# and a second that starts beside it, opens the device and launches. Repeated PAIRS times; every
# pair passes when both processes exit 0. On the H200 this found the lost doorbells and the stale
# commands run when GPPut became visible before what it published (both fixed: docs/device.md,
# "Lost doorbells" and "Stale commands"; `-- --fence store` brings the second back).
# With --starts K the second process is started K times, one after another, beside one busy
# process, so a run sees K times as many starts (a busy process stops at its first failure).
# Arguments after `--` go to both `nvbare bench` processes, to compare options, e.g.
#   tools/contention-check.sh --pairs 80 -- --no-write-ahead
#   tools/contention-check.sh --pairs 80 -- --no-auto-defer
#
# usage: tools/contention-check.sh [--device nvidia:N] [--pairs N] [--starts K] [--delay SECONDS]
#                                  [-- BENCH_ARGS...]
#
# Environment:
#   NVBARE   nvbare binary (default target/release/nvbare; build: cargo build --release -p nvbare-tools)
#   OUT      if set, everything printed is also appended to a log: OUT itself, or
#            OUT/contention-check.log when OUT is a directory
#   STEP_TIMEOUT  wall-clock limit of each process in seconds (default 60)
#
# Prints one line per pair (ok, or FAIL with both exit codes and the errors) and a summary; the
# exit status is 1 if any pair failed, 2 on bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."

CHECK_NAME=contention-check
STEP_TIMEOUT="${STEP_TIMEOUT:-60}"
# shellcheck source=tools/lib/check.sh
. tools/lib/check.sh
check_log

device=nvidia:0
pairs=20
starts=1
delay=0.25
extra=()
usage() { echo "contention-check.sh: $1 (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:?--device needs a value}"; shift 2 ;;
        --device=*) device="${1#--device=}"; shift ;;
        --pairs) pairs="${2:?--pairs needs a value}"; shift 2 ;;
        --pairs=*) pairs="${1#--pairs=}"; shift ;;
        --starts) starts="${2:?--starts needs a value}"; shift 2 ;;
        --starts=*) starts="${1#--starts=}"; shift ;;
        --delay) delay="${2:?--delay needs a value}"; shift 2 ;;
        --delay=*) delay="${1#--delay=}"; shift ;;
        --) shift; extra=("$@"); break ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) usage "unknown argument $1" ;;
    esac
done
case "$pairs" in ''|*[!0-9]*) usage "--pairs wants a whole number, not '$pairs'" ;; esac
[ "$pairs" -ge 1 ] || usage "--pairs must be at least 1"
case "$starts" in ''|*[!0-9]*) usage "--starts wants a whole number, not '$starts'" ;; esac
[ "$starts" -ge 1 ] || usage "--starts must be at least 1"
case "$delay" in ''|*[!0-9.]*) usage "--delay wants seconds, not '$delay'" ;; esac

NVBARE="${NVBARE:-target/release/nvbare}"
if [ ! -x "$NVBARE" ]; then
    echo "contention-check.sh: $NVBARE not found; cargo build --release -p nvbare-tools" >&2
    exit 1
fi

# The busy one does more round trips than it can finish before the second has set up; the
# second does few (each waits ~300 µs for the GPU while both are busy). Between two starts the
# busy one runs alone (~3 µs per round trip) for as long as a process takes to start: 20000 more
# round trips per extra start keep it busy through all of them.
busy_trips=$((150000 + 20000 * (starts - 1)))
common=(bench --device "$device" --launches 100 --copy-bytes 1M --small-copies 100 --timeout-ms 3000)
echo "contention-check: $pairs pairs on $device, second process after ${delay}s, started $starts time(s) per busy process, bench args: ${extra[*]:-(none)}"
passed=0
failed=0
second_runs=0
for i in $(seq 1 "$pairs"); do
    timeout --kill-after=5 "$STEP_TIMEOUT" "$NVBARE" "${common[@]}" --round-trips "$busy_trips" "${extra[@]}" \
        >"$work/a.out" 2>&1 &
    pid=$!
    sleep "$delay"
    rc_b=0
    : >"$work/b.out"
    for s in $(seq 1 "$starts"); do
        timeout --kill-after=5 "$STEP_TIMEOUT" "$NVBARE" "${common[@]}" --round-trips 1000 "${extra[@]}" \
            >"$work/b1.out" 2>&1
        rc=$?
        second_runs=$((second_runs + 1))
        if [ "$rc" -ne 0 ]; then
            rc_b=$rc
            { echo "(start $s of $starts)"; cat "$work/b1.out"; } >>"$work/b.out"
        fi
        # The busy process has stopped (done, or failed): later starts would run beside nothing.
        kill -0 "$pid" 2>/dev/null || break
    done
    wait "$pid"
    rc_a=$?
    if [ "$rc_a" -eq 0 ] && [ "$rc_b" -eq 0 ]; then
        passed=$((passed + 1))
        retries="$(sed -n 's/^ *doorbells rung again *\([0-9]*\).*/\1/p' "$work/a.out" | head -1)"
        unfetched="$(sed -n 's/^ *doorbells rung again .*, \([0-9]*\) with work unfetched.*/\1/p' "$work/a.out" | head -1)"
        echo "ok    pair $i (busy process rang doorbells again ${retries:-0} times, ${unfetched:-0} with work unfetched)"
    else
        failed=$((failed + 1))
        echo "FAIL  pair $i: busy process exit $rc_a, second exit $rc_b (after $s of $starts starts)"
        grep -h -i 'error\|^(start' "$work/a.out" "$work/b.out" | sed 's/^/      /'
    fi
done
echo "contention-check: $passed of $pairs pairs passed, $failed failed; the second process started $second_runs times (bench args: ${extra[*]:-(none)})"
[ "$failed" -eq 0 ]
