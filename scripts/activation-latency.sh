#!/bin/sh
# How long a socket-activated boxd takes to answer its first client,
# against the same request to a boxd already running. Uses systemd's own
# `systemd-socket-activate` (it holds the socket and starts boxd with it on
# the first connection, as the systemd user unit does) and release builds.
# usage: scripts/activation-latency.sh [RUNS]   (default 5)
set -eu
cd "$(dirname "$0")/.."
runs=${1:-5}
bin=target/release
dir=$(mktemp -d /tmp/boxd-activation-XXXXXX)
trap 'pkill -f "boxd --home $dir/home" 2>/dev/null || true; rm -rf "$dir"' EXIT
ms() { echo $(( ($2 - $1) / 1000000 )); }
cold="" warm=""
for _ in $(seq "$runs"); do
  rm -f "$dir/boxd.sock"
  systemd-socket-activate -l "$dir/boxd.sock" "$bin/boxd" --home "$dir/home" \
    --engine namespace --idle-exit 1 >/dev/null 2>&1 &
  while [ ! -S "$dir/boxd.sock" ]; do sleep 0.01; done
  s=$(date +%s%N); BOXD_SOCKET="$dir/boxd.sock" "$bin/boxctl" ls >/dev/null; e=$(date +%s%N)
  cold="$cold $(ms "$s" "$e")"
  s=$(date +%s%N); BOXD_SOCKET="$dir/boxd.sock" "$bin/boxctl" ls >/dev/null; e=$(date +%s%N)
  warm="$warm $(ms "$s" "$e")"
  # Let it exit when idle before the next round.
  while pgrep -f "boxd --home $dir/home" >/dev/null; do sleep 0.2; done
done
median() { echo "$@" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| boxctl ls | median ms ($runs runs) | runs |"
echo "| --- | ---: | --- |"
echo "| first request, activating boxd | $(median $cold) |$cold |"
echo "| next request, boxd running | $(median $warm) |$warm |"
