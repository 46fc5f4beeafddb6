#!/usr/bin/env bash
# Two builds side by side, pair by pair (farm-bench --vs): an exec of
# `true`, `boxctl run --rm` with a mount, `boxctl cp` of a tree in and out, MCP copy_to_box/copy_from_box
# (the official SDK's client, tests/mcp/agent.py copybench) and the ACP
# proxy's fs calls (bench acp_fs). Each build runs its own boxd on a home
# of its own; every box is removed before the daemons stop.
#
#   scripts/compare-builds.sh OLD_DIR NEW_DIR   (each holding boxd, boxd-box,
#                                               boxctl, harness-box-exec)
# Build an older one with `git worktree add /tmp/old REV` and
# `cargo build --release` there (CARGO_TARGET_DIR to share the deps).
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(realpath "$1")
new=$(realpath "$2")
runs=${RUNS:-20}
image=$(target/debug/boxd-test-image)
work=$(mktemp -d /tmp/compare-XXXXXX)
cleanup() {
  for side in old new; do
    [ -S "$work/$side/s.sock" ] || continue
    BOXD_SOCKET="$work/$side/s.sock" BOXD_HOME="$work/$side/home" "${!side}/boxctl" rm -f bench >/dev/null 2>&1 || true
    [ -f "$work/$side/pid" ] && kill "$(cat "$work/$side/pid")" 2>/dev/null || true
  done
  sleep 0.5
  rm -rf "$work"
}
trap cleanup EXIT
for side in old new; do
  bin=${!side}
  mkdir -p "$work/$side"
  "$bin/boxd" --socket "$work/$side/s.sock" --home "$work/$side/home" >"$work/$side/log" 2>&1 &
  echo $! >"$work/$side/pid"
done
for side in old new; do
  for _ in $(seq 50); do [ -S "$work/$side/s.sock" ] && break; sleep 0.1; done
  BOXD_SOCKET="$work/$side/s.sock" BOXD_HOME="$work/$side/home" "${!side}/boxctl" run -d --name bench "$image" sleep 100000 >/dev/null
done
tree="$work/tree"
mkdir -p "$tree"
for i in $(seq 200); do head -c 65536 /dev/urandom >"$tree/f$i"; done
mkdir -p "$work/out-old" "$work/out-new"
ctl() { echo "env BOXD_SOCKET=$work/$1/s.sock BOXD_HOME=$work/$1/home ${!1}/boxctl"; }

echo "== exec true (new vs old)"
farm-bench -n "$runs" --vs "$(ctl old) exec bench true" -- $(ctl new) exec bench true
echo "== cp 200 files, 12.5 MiB, into a box (new vs old)"
farm-bench -n "$runs" --vs "$(ctl old) cp $tree bench:/tmp/tree" -- $(ctl new) cp "$tree" bench:/tmp/tree
echo "== cp the same tree out of the box (new vs old)"
farm-bench -n "$runs" --vs "$(ctl old) cp bench:/tmp/tree $work/out-old/" -- $(ctl new) cp bench:/tmp/tree "$work/out-new/"

echo "== run --rm with a mounted directory: create, start, exec, remove (new vs old)"
mkdir -p "$work/proj"
farm-bench -n "$runs" --vs "$(ctl old) run --rm -v $work/proj:/w $image true" -- $(ctl new) run --rm -v "$work/proj:/w" "$image" true
echo "== MCP copy_to_box / copy_from_box of 4 KiB, 100 each, p50 ms"
py=target/test-venvs/mcp/bin/python
for side in old new; do
  proj="$work/mcp-$side"
  mkdir -p "$proj"
  BOXD_SOCKET="$work/$side/s.sock" BOXD_HOME="$work/$side/home" \
    "$py" tests/mcp/agent.py copybench:100 "${!side}/boxctl" "$image" "$proj" /nonexistent --allow-mount "$proj" |
    python3 -c 'import json,sys,statistics as s; d=json.load(sys.stdin); print(sys.argv[1], {k: round(s.median(v), 2) for k, v in d.items()})' "$side"
done

echo "== ACP fs calls inside a mount (bench acp_fs)"
for side in old new; do
  echo "-- $side"
  BENCH_PROXY="${!side}/harness-box-exec" cargo bench -q --profile dev -p boxd-tests --bench acp_fs 2>/dev/null | grep -v "^$"
done
