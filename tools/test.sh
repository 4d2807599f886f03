#!/usr/bin/env bash
# The whole nvbare test suite, as README documents it and CI runs it (`.ci/run`).
# Works on a fresh machine with the pinned Rust toolchain; fetches the real firmware blobs.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if [ -f tools/fetch-firmware.sh ]; then
    step "firmware: fetch and verify the r570.144 GSP blobs"
    bash tools/fetch-firmware.sh
fi

step "core builds with no default features (no heap)"
cargo build -p nvbare-core --no-default-features --locked

step "freestanding check: core links with no std, no libc, no allocator"
(cd tests/freestanding && CARGO_TARGET_DIR=../../target/freestanding cargo build --release --locked)
target/freestanding/release/nvbare-freestanding
echo "freestanding check passed"

step "tests"
cargo test --workspace --locked

step "the bare-metal path under the simulator's other answers to unknowns (docs/assumptions.md)"
cargo build --quiet --locked -p nvbare-tools
for mode in pessimistic random:11 random:12; do
    echo "-- NVBARE_SIM_UNKNOWNS=$mode"
    NVBARE_SIM_UNKNOWNS=$mode cargo test --quiet --locked -p nvbare-integration --test baremetal_sim
    for chip in ad102 gh100 gb202; do
        for cmd in "boot" "demo" "demo --faults"; do
            # shellcheck disable=SC2086 # $cmd is a command and its flags
            if ! NVBARE_SIM_UNKNOWNS=$mode target/debug/nvbare $cmd --device "sim:$chip" \
                >target/unknowns-run.log 2>&1; then
                cat target/unknowns-run.log
                echo "nvbare $cmd --device sim:$chip failed with NVBARE_SIM_UNKNOWNS=$mode" >&2
                exit 1
            fi
            echo "nvbare $cmd --device sim:$chip: $(tail -1 target/unknowns-run.log)"
        done
    done
done

step "witness: unmodified tinygrad 0.14.0 boots the simulated AD102 and GB202 (docs/witness.md)"
bash tools/witness/tinygrad.sh

echo
echo "all tests passed"
