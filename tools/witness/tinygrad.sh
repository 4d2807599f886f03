#!/usr/bin/env bash
# The tinygrad witness: unmodified tinygrad 0.14.0 (from the Python package index, pinned by
# hash) boots nvbare's simulated GPUs through `nvbare serve` over its remote PCI protocol,
# copies tensors in and out, finalizes, and does it all again from a second process.
# docs/witness.md says what it found. Needs python3 (3.10+) with venv and pip, the package
# index, and the r570.144 firmware in nvbare's cache (bash tools/fetch-firmware.sh).
#
#   bash tools/witness/tinygrad.sh            # sim:ad102 and sim:gb202
#   WITNESS_CHIPS=ad102 bash tools/witness/tinygrad.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

chips=${WITNESS_CHIPS:-"ad102 gb202"}
work=${WITNESS_DIR:-target/witness}
mkdir -p "$work"
work=$(cd "$work" && pwd)

fw_dir=${NVBARE_FIRMWARE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nvbare/firmware}
if [ ! -f "$fw_dir/nvidia/ga102/gsp/gsp-570.144.bin" ]; then
    echo "witness: no firmware in $fw_dir; run bash tools/fetch-firmware.sh first" >&2
    exit 1
fi

. tools/witness/venv.sh
witness_venv "$work"
"$venv/bin/python" tools/witness/tinygrad_firmware.py "$fw_dir" "$work/cache"

cargo build --quiet --locked -p nvbare-tools
nvbare=target/debug/nvbare

server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null || true; }
trap cleanup EXIT

for chip in $chips; do
    log=$work/serve-$chip.log
    "$nvbare" serve --device "sim:$chip" --listen 127.0.0.1:0 --trace "$work/trace-$chip.txt" \
        >"$log" 2>&1 &
    server=$!
    addr=
    for _ in $(seq 100); do
        # The log may not exist yet: the server creates it as it starts.
        addr=$(sed -n 's/^nvbare serve: listening on \([0-9.:]*\) .*/\1/p' "$log" 2>/dev/null | head -1 || true)
        [ -n "$addr" ] && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$addr" ]; then
        echo "witness: nvbare serve did not start:" >&2
        cat "$log" >&2
        exit 1
    fi
    echo "witness: sim:$chip served on $addr"
    for run in 1 2; do
        out=$work/tinygrad-$chip-$run.log
        if ! XDG_CACHE_HOME=$work/cache REMOTE=$addr DEV=PCI+NV \
            timeout 600 "$venv/bin/python" tools/witness/tinygrad_witness.py >"$out" 2>&1; then
            echo "witness: FAIL: tinygrad run $run on sim:$chip; its output:" >&2
            cat "$out" >&2
            echo "witness: nvbare serve's log:" >&2
            cat "$log" >&2
            exit 1
        fi
        sed "s/^/  [sim:$chip run $run] /" "$out"
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=
    if grep -q "the simulated hardware saw" "$log"; then
        echo "witness: FAIL: the simulated $chip saw driver errors:" >&2
        grep "the simulated hardware saw" "$log" >&2
        exit 1
    fi
done
echo "witness: tinygrad booted and drove: $chips (traces in $work/trace-*.txt)"
