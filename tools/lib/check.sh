# Shared by tools/hw-check.sh and tools/p2p-check.sh; sourced, not run. The sourcing script sets
# CHECK_NAME (used in messages and the log's file name) and STEP_TIMEOUT (seconds each
# run_logged step may take), sources this file, then calls check_log before printing anything.

# When OUT is set, everything printed is also appended to OUT itself, or to OUT/$CHECK_NAME.log
# when OUT is a directory (the benchmark JSON then goes to OUT/bench, via BENCH_DIR).
check_log() {
    [ -n "${OUT:-}" ] || return 0
    local log="$OUT"
    if [ -d "$OUT" ]; then
        log="$OUT/$CHECK_NAME.log"
        export BENCH_DIR="${BENCH_DIR:-$OUT/bench}"
    fi
    mkdir -p "$(dirname "$log")"
    exec > >(tee -a "$log") 2>&1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/nvbare-$CHECK_NAME.XXXXXX")"
trap 'rm -rf "$work"' EXIT

results=()
failed=0

record() { # record NAME STATUS [DETAIL]
    results+=("$(printf '%-4s  %s%s' "$2" "$1" "${3:+  ($3)}")")
    [ "$2" = FAIL ] && failed=1
    printf '%s: %s%s\n' "$2" "$1" "${3:+ ($3)}"
}

step() { printf '\n==> %s\n' "$*"; }

# run_logged NAME CMD...: runs CMD with a hard wall-clock limit of STEP_TIMEOUT seconds, output
# to $work/NAME.{out,err}, echoes both, returns CMD's status (124/137 when it was killed for
# taking too long).
run_logged() {
    local name="$1"; shift
    timeout --kill-after=10 "$STEP_TIMEOUT" "$@" >"$work/$name.out" 2>"$work/$name.err"
    local rc=$?
    cat "$work/$name.out"
    cat "$work/$name.err" >&2
    return $rc
}

# check_summary [NOTE]: every step's result, then the verdict; exits 1 if any step failed.
check_summary() {
    printf '\n==> summary%s\n' "${1:+ ($1)}"
    printf '%s\n' "${results[@]}"
    if [ "$failed" -ne 0 ]; then
        echo "$CHECK_NAME: FAILED"
        exit 1
    fi
    echo "$CHECK_NAME: all steps passed"
}
