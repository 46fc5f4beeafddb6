#!/usr/bin/env bash
# Prints the absolute path of a `boxlite` binary (the CLI of BoxLite 0.10.8,
# crate `boxlite-cli` from the Rust package registry), whose `boxlite serve`
# is the BoxLite REST server that boxd's remote engine is tested against;
# builds it once if needed.
#
#   scripts/boxlite-serve.sh [CACHE_DIR]
#
# - If BOXLITE_BIN is set and runs, prints it.
# - Otherwise CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/boxd/boxlite-cli-0.10.8)
#   gets `cargo install boxlite-cli --version =0.10.8 --locked --debug`, in
#   BoxLite's stub mode (BOXLITE_DEPS_STUB=1, as boxd itself builds: the
#   runtime is not embedded, so run it with BOXLITE_RUNTIME_DIR from
#   scripts/boxlite-runtime.sh). A debug build: it only serves tests, and
#   takes about half as long to build (minutes, on 2 cores), without debug
#   info (its build directory, removed after, stays a few GB smaller).
# - Idempotent: a binary that answers `--version` with 0.10.8 is reused.
#
# Only the binary's path goes to stdout; progress goes to stderr.
set -euo pipefail

VERSION=0.10.8
log() { printf 'boxlite-serve: %s\n' "$*" >&2; }

good() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q "$VERSION"; }

if [ -n "${BOXLITE_BIN:-}" ] && good "$BOXLITE_BIN"; then
    echo "$BOXLITE_BIN"
    exit 0
fi
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/boxd/boxlite-cli-$VERSION}
bin="$cache/bin/boxlite"
if good "$bin"; then
    echo "$bin"
    exit 0
fi
mkdir -p "$cache"
# One build at a time (test binaries run side by side).
exec 9>"$cache/.lock"
flock 9
if good "$bin"; then
    echo "$bin"
    exit 0
fi
log "building boxlite-cli $VERSION from the Rust package registry into $cache (once; several minutes)"
started=$(date +%s)
BOXLITE_DEPS_STUB=1 CARGO_TARGET_DIR="$cache/target" CARGO_PROFILE_DEV_DEBUG=0 \
    cargo install boxlite-cli --version "=$VERSION" --locked --debug --root "$cache" --quiet >&2
rm -rf "$cache/target"
good "$bin" || { log "error: $bin did not build"; exit 1; }
log "built in $(( $(date +%s) - started )) s"
echo "$bin"
