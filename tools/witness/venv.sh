# Sourced by the scripts that run tinygrad 0.14.0 (tools/witness/tinygrad.sh,
# tools/libcuda/tinygrad/sim.sh): makes `$1/venv` with tinygrad pinned by hash
# (tools/witness/requirements.txt) unless it already imports, and sets `venv` to it.
witness_venv() {
    venv=$1/venv
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tinygrad" 2>/dev/null; then
        echo "installing tinygrad 0.14.0 into $venv"
        rm -rf "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
            --require-hashes -r tools/witness/requirements.txt
    fi
}
