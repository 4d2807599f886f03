#!/usr/bin/env bash
# Fetch NVIDIA's GSP firmware r570.144 (linux-firmware's files, as shipped in Debian's
# firmware-nvidia-graphics 20260916-1) into a cache outside git, and verify every file against
# the pinned sha256 list firmware/r570.144.sha256.
#
#   tools/fetch-firmware.sh            fetch if needed, then verify (idempotent)
#   tools/fetch-firmware.sh --check    verify the cache only; never touches the network
#   tools/fetch-firmware.sh --force    download and reinstall even if the cache verifies
#
# Environment:
#   NVBARE_FIRMWARE_DIR    cache directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/nvbare/firmware);
#                          files land in $NVBARE_FIRMWARE_DIR/nvidia/<chip>/gsp/<name>-570.144.bin
#   NVBARE_FIRMWARE_SUMS   the pinned list (default: firmware/r570.144.sha256 next to this script)
#   NVBARE_FIRMWARE_DEB    use this local .deb instead of downloading (offline install)
#   NVBARE_DEBIAN_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#
# The files are pinned, not the package: Debian's pool keeps only current versions, so when
# 20260916-1 is gone the script takes the current firmware-nvidia-graphics and accepts it only if
# every pinned file's sha256 matches. The machine's apt configuration is never changed: apt runs
# with a temporary sources list, state, lists and cache directory.
set -euo pipefail

readonly FW_VERSION=570.144
readonly PKG=firmware-nvidia-graphics
readonly PKG_VERSION=20260916-1
readonly PKG_SHA256=438dea065c930a4626c9cb711635149507471307f9d7ede9b981c61f963e0d68
readonly SUITE=sid
readonly COMPONENT=non-free-firmware
readonly POOL_PATH=pool/non-free-firmware/f/firmware-nonfree
MIRROR=${NVBARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEST=${NVBARE_FIRMWARE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nvbare/firmware}

say() { printf 'fetch-firmware: %s\n' "$*"; }
warn() { printf 'fetch-firmware: warning: %s\n' "$*" >&2; }
die() {
    printf 'fetch-firmware: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    cat <<'USAGE'
usage: fetch-firmware.sh [--check | --force]
Fetches NVIDIA GSP firmware r570.144 (Debian firmware-nvidia-graphics 20260916-1) into
$NVBARE_FIRMWARE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/nvbare/firmware) and verifies every
file against firmware/r570.144.sha256.
  --check   verify the cache only; never uses the network; exit 1 if incomplete
  --force   download and reinstall even if the cache verifies
Environment: NVBARE_FIRMWARE_DIR, NVBARE_FIRMWARE_SUMS (pinned list), NVBARE_FIRMWARE_DEB (a local
.deb: offline install), NVBARE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
USAGE
}

mode=fetch
for arg in "$@"; do
    case $arg in
    --check) mode=check ;;
    --force) mode=force ;;
    -h | --help)
        usage
        exit 0
        ;;
    *) die "unknown argument '$arg' (try --help)" ;;
    esac
done

# --- the pinned list -------------------------------------------------------------------------
if [[ -n ${NVBARE_FIRMWARE_SUMS:-} ]]; then
    SUMS=$NVBARE_FIRMWARE_SUMS
else
    script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]:-$0}")" && pwd)
    SUMS=$script_dir/../firmware/r570.144.sha256
fi
[[ -r $SUMS ]] || die "cannot read the pinned sha256 list '$SUMS'; run this script from the \
nvbare repository (tools/fetch-firmware.sh) or set NVBARE_FIRMWARE_SUMS"

HASHES=()
PATHS=()
while read -r hash path _rest; do
    [[ -z $hash || $hash == \#* ]] && continue
    [[ $hash =~ ^[0-9a-f]{64}$ ]] || die "bad line in $SUMS: '$hash $path'"
    [[ $path == nvidia/*/gsp/*-$FW_VERSION.bin && $path != *..* ]] ||
        die "unexpected path '$path' in $SUMS"
    HASHES+=("$hash")
    PATHS+=("$path")
done <"$SUMS"
readonly NFILES=${#PATHS[@]}
((NFILES > 0)) || die "$SUMS lists no files"

sha256_of() { sha256sum -- "$1" | cut -d' ' -f1; }

# Verifies the cache; prints one line per problem; returns 0 when every file matches. Hard
# links (the shared images) are hashed once.
verify_cache() {
    local i f id sum bad=0 missing=0
    local -A seen=()
    for i in "${!PATHS[@]}"; do
        f=$DEST/${PATHS[$i]}
        if [[ ! -f $f ]]; then
            missing=$((missing + 1))
            continue
        fi
        id=$(stat -L -c '%d:%i' -- "$f" 2>/dev/null || echo "$f")
        if [[ -z ${seen[$id]:-} ]]; then
            seen[$id]=$(sha256_of "$f")
        fi
        sum=${seen[$id]}
        if [[ $sum != "${HASHES[$i]}" ]]; then
            say "  mismatch: $f (sha256 differs from the pinned value)"
            bad=$((bad + 1))
        fi
    done
    if ((missing > 0)); then say "  $missing of $NFILES files missing in $DEST"; fi
    if ((bad > 0)); then say "  $bad of $NFILES files do not match $SUMS"; fi
    ((bad == 0 && missing == 0))
}

say "firmware r$FW_VERSION: $NFILES pinned files, cache $DEST"
if [[ $mode != force ]]; then
    say "[1/5] verifying the cache"
    if verify_cache; then
        say "all $NFILES files present and verified; nothing to download"
        exit 0
    fi
fi
if [[ $mode == check ]]; then
    die "the firmware cache is incomplete; run tools/fetch-firmware.sh (or: nvbare fw fetch)"
fi

# --- get the package -------------------------------------------------------------------------
for cmd in sha256sum tar; do
    command -v "$cmd" >/dev/null || die "'$cmd' is required but not installed"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nvbare-firmware.XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
chmod 755 "$tmp"

deb=
exact=0
if [[ -n ${NVBARE_FIRMWARE_DEB:-} ]]; then
    say "[2/5] using the local package $NVBARE_FIRMWARE_DEB (NVBARE_FIRMWARE_DEB)"
    [[ -r $NVBARE_FIRMWARE_DEB ]] || die "cannot read NVBARE_FIRMWARE_DEB='$NVBARE_FIRMWARE_DEB'"
    deb=$NVBARE_FIRMWARE_DEB
elif command -v apt-get >/dev/null; then
    say "[2/5] downloading $PKG $PKG_VERSION from Debian $SUITE/$COMPONENT (temporary apt state)"
    a=$tmp/apt
    mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$a/state" "$a/dl"
    chmod -R 755 "$a"
    : >"$a/status"
    apt_opts=(
        -o "Dir::Etc::SourceList=$a/sources.list"
        -o "Dir::Etc::SourceParts=/dev/null"
        -o "Dir::Etc::Preferences=/dev/null"
        -o "Dir::Etc::PreferencesParts=/dev/null"
        -o "Dir::State=$a/state"
        -o "Dir::State::Lists=$a/lists"
        -o "Dir::State::status=$a/status"
        -o "Dir::Cache=$a/cache"
        -o "APT::Sandbox::User=$(id -un)"
        -o "Acquire::Languages=none"
        -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false"
        -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false"
        -o "Acquire::Retries=3"
        -q
    )
    echo "deb $MIRROR $SUITE $COMPONENT" >"$a/sources.list"
    if ! apt-get "${apt_opts[@]}" update; then
        # Hosts without Debian's archive key (e.g. Ubuntu) cannot authenticate the index. The
        # package and every file are pinned by sha256 below, so integrity does not rest on it.
        warn "apt-get update failed (no Debian archive key on this host?); retrying without \
index authentication - integrity rests on the pinned sha256 of the package and of every file"
        echo "deb [trusted=yes] $MIRROR $SUITE $COMPONENT" >"$a/sources.list"
        apt-get "${apt_opts[@]}" update || die "apt-get update against $MIRROR failed; check \
the network or set NVBARE_DEBIAN_MIRROR, or download ${PKG}_${PKG_VERSION}_all.deb yourself and \
set NVBARE_FIRMWARE_DEB"
    fi
    if (cd "$a/dl" && apt-get "${apt_opts[@]}" download "$PKG=$PKG_VERSION"); then
        exact=1
    else
        current=$(apt-cache "${apt_opts[@]}" policy "$PKG" 2>/dev/null |
            sed -n 's/^ *Candidate: *//p')
        [[ -n $current && $current != "(none)" ]] || die "Debian $SUITE has no $PKG any more; \
download ${PKG}_${PKG_VERSION}_all.deb (e.g. from snapshot.debian.org) and set NVBARE_FIRMWARE_DEB"
        say "      $PKG $PKG_VERSION is no longer in Debian's pool (it keeps only current versions);"
        say "      trying the current version $current instead: the files are pinned, not the"
        say "      package, so it is accepted only if every one of the $NFILES pinned files matches"
        (cd "$a/dl" && apt-get "${apt_opts[@]}" download "$PKG=$current") ||
            die "apt-get download $PKG=$current failed"
    fi
    deb=$(find "$a/dl" -maxdepth 1 -name "${PKG}_*.deb" -print -quit)
    [[ -n $deb ]] || die "apt-get reported success but left no .deb"
else
    url=$MIRROR/$POOL_PATH/${PKG}_${PKG_VERSION}_all.deb
    say "[2/5] apt-get not found; downloading $url"
    deb=$tmp/${PKG}_${PKG_VERSION}_all.deb
    if command -v curl >/dev/null; then
        curl -fL --retry 3 -o "$deb" "$url" || die "download of $url failed"
    elif command -v wget >/dev/null; then
        wget -O "$deb" "$url" || die "download of $url failed"
    else
        die "need apt-get, curl or wget to download $PKG; or set NVBARE_FIRMWARE_DEB"
    fi
    exact=1
fi

# --- check the package -----------------------------------------------------------------------
say "[3/5] checking the package"
deb_sha=$(sha256_of "$deb")
if [[ $deb_sha == "$PKG_SHA256" ]]; then
    say "      sha256 $deb_sha is the pinned package's ($PKG $PKG_VERSION)"
elif ((exact)); then
    die "$deb has sha256 $deb_sha, expected $PKG_SHA256 for $PKG $PKG_VERSION; the download is \
corrupt or was tampered with - retry, or use another mirror (NVBARE_DEBIAN_MIRROR)"
else
    warn "package sha256 $deb_sha is not the pinned one (a different package version);"
    warn "accepting it only if every pinned file's sha256 matches"
fi

# --- extract ---------------------------------------------------------------------------------
say "[4/5] extracting usr/lib/firmware/nvidia/*/gsp/"
root=$tmp/root
mkdir -p "$root"
members=('./usr/lib/firmware/nvidia/*/gsp/*')
if command -v dpkg-deb >/dev/null; then
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$root" --wildcards "${members[@]}" ||
        die "extracting $deb failed"
else
    command -v ar >/dev/null || die "need dpkg-deb or ar (binutils) to unpack $deb"
    data=$(ar t "$deb" | grep '^data\.tar') || die "$deb has no data.tar member"
    case $data in
    *.xz) dec=(xz -dc) ;;
    *.zst) dec=(zstd -dc) ;;
    *.gz) dec=(gzip -dc) ;;
    *) dec=(cat) ;;
    esac
    ar p "$deb" "$data" | "${dec[@]}" | tar -x -C "$root" --wildcards "${members[@]}" ||
        die "extracting $deb failed"
fi

# Resolves a packaged path (following symlinks, staying inside the package) to a readable file,
# decompressing .zst/.xz variants if a later package compresses its firmware.
resolve() {
    local p=$root/usr/lib/firmware/$1 real
    if [[ -e $p ]]; then
        real=$(readlink -f -- "$p")
        [[ $real == "$root"/* && -f $real ]] || return 1
        printf '%s\n' "$real"
    elif [[ -e $p.zst ]] && command -v zstd >/dev/null; then
        real=$(readlink -f -- "$p.zst")
        [[ $real == "$root"/* ]] || return 1
        zstd -q -dc -- "$real" >"$tmp/dec.$2" && printf '%s\n' "$tmp/dec.$2"
    elif [[ -e $p.xz ]]; then
        real=$(readlink -f -- "$p.xz")
        [[ $real == "$root"/* ]] || return 1
        xz -dc -- "$real" >"$tmp/dec.$2" && printf '%s\n' "$tmp/dec.$2"
    else
        return 1
    fi
}

SRC=()
errors=0
for i in "${!PATHS[@]}"; do
    if ! src=$(resolve "${PATHS[$i]}" "$i"); then
        say "      missing from the package: ${PATHS[$i]}"
        errors=$((errors + 1))
        SRC+=("")
        continue
    fi
    if [[ $(sha256_of "$src") != "${HASHES[$i]}" ]]; then
        say "      sha256 mismatch: ${PATHS[$i]}"
        errors=$((errors + 1))
    fi
    SRC+=("$src")
done
if ((errors > 0)); then
    die "$errors of $NFILES pinned files are missing or differ in $(basename "$deb"); the cache \
was not changed. This package does not carry GSP r$FW_VERSION as pinned: get \
${PKG}_${PKG_VERSION}_all.deb (e.g. from snapshot.debian.org) and set NVBARE_FIRMWARE_DEB"
fi
say "      all $NFILES files found (symlinks resolved) and match $SUMS"

# --- install ---------------------------------------------------------------------------------
say "[5/5] installing into $DEST"
declare -A first_of_hash=()
for i in "${!PATHS[@]}"; do
    dst=$DEST/${PATHS[$i]}
    mkdir -p -- "$(dirname -- "$dst")"
    part=$dst.part.$$
    rm -f -- "$part"
    h=${HASHES[$i]}
    # Identical images (symlinks in the package) become hard links where possible: real files
    # that take their space once.
    if [[ -n ${first_of_hash[$h]:-} ]] && ln -- "${first_of_hash[$h]}" "$part" 2>/dev/null; then
        :
    else
        cp -- "${SRC[$i]}" "$part"
        chmod 0444 -- "$part"
        first_of_hash[$h]=$dst
    fi
    mv -f -- "$part" "$dst"
    say "      ${PATHS[$i]}"
done

say "verifying the installed files"
verify_cache || die "the installed files do not verify (disk full or a concurrent writer?); \
rerun with --force"
say "done: $NFILES files in $DEST"
