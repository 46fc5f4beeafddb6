#!/usr/bin/env bash
# Prints the absolute path of a directory holding the BoxLite 0.10.8 runtime
# (boxlite-shim, boxlite-guest, libkrunfw.so.5, mke2fs, debugfs, guest-mke2fs,
# guest-resize2fs, bwrap), obtaining it once if needed.
#
#   scripts/boxlite-runtime.sh [CACHE_DIR]
#
# - If BOXLITE_RUNTIME_DIR is set and holds all eight files, prints it.
# - Otherwise uses CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/boxd/boxlite-0.10.8):
#   a private venv there gets `pip install boxlite==0.10.8` (never the user's
#   Python), a runtime is constructed once in a throwaway HOME so the wheel
#   extracts its embedded runtime, and the eight files are copied to
#   CACHE_DIR/runtime/. It also writes
#   CACHE_DIR/boxlite-runtime-v0.10.8-linux-x64-gnu.tar.gz (one top-level
#   directory), usable as BOXLITE_RUNTIME_URL=file://... for `cargo build`.
# - Idempotent: a complete CACHE_DIR/runtime (and tarball) is reused as is.
#
# Only the runtime directory goes to stdout; progress goes to stderr.
# Linux x86_64 only for now: elsewhere it prints nothing and exits 0.
#
# Environment: BOXLITE_RUNTIME_DIR (see above); BOXD_PYTHON (interpreter used
# to create the venv, default python3; the 0.10.8 wheels are per CPython
# version); pip's own PIP_* variables (index, proxy) are honoured.
# Needs a host where BoxLite's KVM check passes (/dev/kvm opens read-write),
# since the wheel only extracts its runtime when a runtime is constructed.
set -euo pipefail

VERSION=0.10.8
TARGET=linux-x64-gnu
FILES=(boxlite-shim boxlite-guest libkrunfw.so.5 mke2fs debugfs guest-mke2fs guest-resize2fs bwrap)

log() { printf 'boxlite-runtime: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# complete DIR: true when DIR holds every runtime file (executables executable).
complete() {
    local dir=$1 f
    [ -n "$dir" ] && [ -d "$dir" ] || return 1
    for f in "${FILES[@]}"; do
        [ -f "$dir/$f" ] && [ -s "$dir/$f" ] || return 1
    done
    for f in boxlite-shim boxlite-guest mke2fs debugfs bwrap; do
        [ -x "$dir/$f" ] || return 1
    done
}

case "$(uname -s)/$(uname -m)" in
    Linux/x86_64 | Linux/amd64) ;;
    *)
        log "no BoxLite $VERSION runtime recipe for $(uname -s)/$(uname -m) yet (Linux x86_64 only); nothing to do"
        exit 0
        ;;
esac

# 1. An explicit BOXLITE_RUNTIME_DIR (BoxLite accepts a colon-separated list).
if [ -n "${BOXLITE_RUNTIME_DIR:-}" ]; then
    IFS=: read -r -a dirs <<<"$BOXLITE_RUNTIME_DIR"
    for d in "${dirs[@]}"; do
        if complete "$d"; then
            (cd "$d" && pwd -P)
            exit 0
        fi
    done
    log "BOXLITE_RUNTIME_DIR=$BOXLITE_RUNTIME_DIR does not hold all of: ${FILES[*]}; ignoring it"
fi

cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/boxd/boxlite-$VERSION}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd -P)
runtime=$cache/runtime
tarball=$cache/boxlite-runtime-v$VERSION-$TARGET.tar.gz

# One run at a time per cache dir.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$cache/.lock"
    flock 9
fi

# make_tarball: CACHE/boxlite-runtime-vX-TARGET.tar.gz from CACHE/runtime.
make_tarball() {
    local stage top=boxlite-runtime-v$VERSION-$TARGET
    stage=$(mktemp -d "$cache/.stage.XXXXXX")
    mkdir "$stage/$top"
    for f in "${FILES[@]}"; do cp -p "$runtime/$f" "$stage/$top/"; done
    tar -C "$stage" --owner=0 --group=0 -czf "$stage/out.tar.gz" "$top"
    mv -f "$stage/out.tar.gz" "$tarball"
    rm -rf "$stage"
    log "wrote $tarball"
}

if complete "$runtime"; then
    [ -s "$tarball" ] || make_tarball
    printf '%s\n' "$runtime"
    exit 0
fi

# 2. A private venv with the wheel.
venv=$cache/venv
py=$venv/bin/python
have_wheel() {
    [ -x "$py" ] && "$py" - "$VERSION" >/dev/null 2>&1 <<'EOF'
import sys, importlib.metadata as m
sys.exit(0 if m.version("boxlite") == sys.argv[1] else 1)
EOF
}
if ! have_wheel; then
    base_py=${BOXD_PYTHON:-python3}
    command -v "$base_py" >/dev/null 2>&1 || die "$base_py not found (set BOXD_PYTHON to a CPython 3 interpreter)"
    if [ ! -x "$py" ]; then
        log "creating venv $venv with $base_py ($("$base_py" --version 2>&1))"
        "$base_py" -m venv "$venv" >&2 ||
            die "could not create a venv with $base_py (Debian/Ubuntu: apt-get install python3-venv)"
    fi
    log "installing boxlite==$VERSION into $venv (about 40 MB)"
    # Unset PYTHONPATH/PIP_USER etc. so nothing leaks in from the user's Python.
    env -u PYTHONPATH -u PYTHONHOME PIP_USER=0 PIP_REQUIRE_VIRTUALENV=1 \
        "$py" -m pip install --disable-pip-version-check --no-input -q "boxlite==$VERSION" >&2 ||
        die "pip install boxlite==$VERSION failed (is there a wheel for $("$py" --version 2>&1)? set BOXD_PYTHON to another interpreter)"
fi

# 3. Construct a runtime once in a throwaway HOME: the wheel extracts its
#    embedded runtime to HOME/.local/share/boxlite/runtimes/v$VERSION-*/.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/boxlite-runtime.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
log "extracting the wheel's embedded runtime (throwaway home $scratch)"
if ! env -u PYTHONPATH -u PYTHONHOME -u BOXLITE_RUNTIME_DIR -u BOXLITE_HOME \
    HOME="$scratch" XDG_DATA_HOME="$scratch/.local/share" RUST_LOG=warn \
    "$py" - "$scratch/bx" >&2 <<'EOF'
import sys, boxlite
rt = boxlite.Boxlite(boxlite.Options(home_dir=sys.argv[1]))
del rt
EOF
then
    die "constructing a BoxLite runtime failed; the wheel extracts its runtime only after BoxLite's KVM check passes (needs a readable/writable /dev/kvm)"
fi

found=
for d in "$scratch"/.local/share/boxlite/runtimes/v"$VERSION"-*/; do
    if complete "$d"; then found=${d%/}; break; fi
done
[ -n "$found" ] || die "no complete runtime found under $scratch/.local/share/boxlite/runtimes"
log "found $(basename "$found")"

tmp_rt=$(mktemp -d "$cache/.runtime.XXXXXX")
for f in "${FILES[@]}"; do cp -p "$found/$f" "$tmp_rt/"; done
chmod 755 "$tmp_rt"
printf '%s\n' "$(basename "$found")" >"$tmp_rt/.source"
rm -rf "$runtime"
mv "$tmp_rt" "$runtime"
make_tarball

printf '%s\n' "$runtime"
