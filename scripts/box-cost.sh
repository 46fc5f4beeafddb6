#!/usr/bin/env bash
# The cost of a box on this host: N boxes from the Node image on a fresh
# daemon (release build, its own temporary home): create and start time per
# box, disk per box, memory per idle running box, and the daemon's own.
# usage: scripts/box-cost.sh [N]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}
B=target/release/boxctl
image=$(scripts/node-image.sh)
export BOXD_HOME
BOXD_HOME=$(mktemp -d /tmp/boxd-cost-XXXXXX)
unset BOXD_SOCKET
# Boxes outlive their daemon: removed first, or their supervisors run on.
trap '"$B" ps -a -q 2>/dev/null | xargs -r "$B" rm -f >/dev/null 2>&1 || true; "$B" daemon stop >/dev/null 2>&1 || true; rm -rf "$BOXD_HOME"' EXIT
"$B" daemon start >/dev/null
# The first create unpacks the image into the cache; not counted below.
"$B" create warm --image "$image" >/dev/null 2>&1
"$B" rm warm >/dev/null
now() { date +%s.%N; }
t=$(now)
for i in $(seq "$N"); do "$B" create "c$i" --image "$image" >/dev/null 2>&1; done
created=$(now)
for i in $(seq "$N"); do "$B" start "c$i" >/dev/null; done
started=$(now)
sleep 1
daemon_pid=$("$B" --json daemon status | sed -n 's/.*"pid":\([0-9]*\).*/\1/p')
# Every process boxd keeps for the boxes: each box's supervisor (a
# `boxd __supervise` whose stderr is BOX/supervisor.log under this home,
# no longer the daemon's child) and everything below it (bubblewrap, the
# box's init, its zygote), once each. PSS shares what the processes share
# (the boxd binary, the image's files) fairly between them.
supervisors=""
for p in $(pgrep -f -- "__supervise" || true); do
  case "$(readlink "/proc/$p/fd/2" 2>/dev/null)" in
    "$BOXD_HOME"/boxes/*) supervisors="$supervisors $p" ;;
  esac
done
descendants() {
  local kids
  kids=$(pgrep -P "$1" || true)
  for k in $kids; do echo "$k"; descendants "$k"; done
}
all=$(for s in $supervisors; do echo "$s"; descendants "$s"; done | sort -u)
rss_kib=0
pss_kib=0
for p in $all; do
  r=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
  q=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || true)
  rss_kib=$((rss_kib + ${r:-0}))
  pss_kib=$((pss_kib + ${q:-0}))
done
awk -v n="$N" -v t="$t" -v c="$created" -v s="$started" \
    -v disk="$(du -sk "$BOXD_HOME/boxes" | cut -f1)" -v img="$(du -sm "$BOXD_HOME/images" | cut -f1)" \
    -v rss="$rss_kib" -v pss="$pss_kib" -v procs="$(echo $all | wc -w)" -v drss="$(awk '/VmRSS/ {print $2}' "/proc/$daemon_pid/status")" 'BEGIN {
  printf "| %d boxes from the Node image (namespace engine) | per box |\n| --- | ---: |\n", n
  printf "| create (an overlay over the shared image) | %.0f ms |\n", (c - t) * 1000 / n
  printf "| start | %.0f ms |\n", (s - c) * 1000 / n
  printf "| disk (the box'"'"'s own layer and record) | %.0f KiB (image cache, shared: %d MB) |\n", disk / n, img
  printf "| memory, idle running box (%d processes: supervisor, bwrap, init, zygote) | %.2f MiB PSS (%.1f MiB RSS) |\n", procs / n, pss / 1024 / n, rss / 1024 / n
  printf "| the daemon itself, with %d boxes running | %.1f MB RSS |\n", n, drss / 1024
}'
