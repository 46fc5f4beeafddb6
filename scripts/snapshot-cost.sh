#!/usr/bin/env bash
# What a snapshot, a clone and an export cost: a box of IMAGE (busybox by
# default, or the Node image: `node`) writes 10 MiB, then the box is
# snapshotted (running), cloned (running), exported and imported, N times
# each, on a fresh daemon with its own temporary home. Prints seconds and
# bytes per run. Uses the debug build unless BUILD=release.
# usage: scripts/snapshot-cost.sh [busybox|node] [N]   (default busybox, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-busybox}
N=${2:-5}
B=target/${BUILD:-debug}/boxctl
case "$which" in
  node) image=$(scripts/node-image.sh) ;;
  *) image=$(ls -d target/test-images/busybox) ; image=$(cd "$image" && pwd) ;;
esac
export BOXD_HOME
BOXD_HOME=$(mktemp -d /tmp/boxd-snap-XXXXXX)
unset BOXD_SOCKET
out=$(mktemp -d /tmp/boxd-snap-out-XXXXXX)
trap '"$B" stop -f b >/dev/null 2>&1 || true; for i in $(seq "$N"); do "$B" rm -f "c$i" >/dev/null 2>&1; "$B" rm -f "i$i" >/dev/null 2>&1; done; "$B" rm -f b >/dev/null 2>&1; "$B" daemon stop >/dev/null 2>&1 || true; rm -rf "$BOXD_HOME" "$out"' EXIT
"$B" daemon start >/dev/null
"$B" create b --image "$image" >/dev/null 2>&1
"$B" start b >/dev/null
"$B" exec b -- dd if=/dev/urandom of=/ten bs=1M count=10 2>/dev/null
now() { date +%s.%N; }
secs() { echo "$1 $2" | awk '{printf "%.3f", $2 - $1}'; }
echo "image: $which; the box's writes: $("$B" --json inspect b | sed -n 's/.*"diskBytes":\([0-9]*\).*/\1/p') bytes on disk"
for i in $(seq "$N"); do
  t=$(now); size=$("$B" --json snapshot create b "s$i" | sed -n 's/.*"sizeBytes":\([0-9]*\).*/\1/p'); s=$(now)
  "$B" clone b "c$i" >/dev/null; c=$(now)
  "$B" export b "$out/b$i.tgz" >/dev/null; e=$(now)
  "$B" import-box "$out/b$i.tgz" "i$i" >/dev/null; m=$(now)
  echo "run $i: snapshot $(secs "$t" "$s") s, $size bytes; clone $(secs "$s" "$c") s; export $(secs "$c" "$e") s, $(stat -c %s "$out/b$i.tgz") bytes; import $(secs "$e" "$m") s"
done
