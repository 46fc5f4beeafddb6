#!/usr/bin/env bash
# Box start, one build's binaries against another's, in alternating pairs:
#   scripts/ab-start.sh OLD_BIN_DIR NEW_BIN_DIR [PAIRS]
# Each directory holds boxd, boxd-box, boxctl and boxd-test-image (copy
# them out of target/release after building each revision). Each build
# gets a daemon on a home of its own and one busybox box, stopped and
# started PAIRS times (default 30), 0.3 s apart so that each start comes
# after a pause, as a user's do. Prints the daemon's own start time
# ("started box … in N ms") and the whole `boxctl start`; removes the
# boxes before it stops the daemons.
set -euo pipefail
old=$1 new=$2 pairs=${3:-30}
out=$(mktemp)
declare -A dirs
for v in old new; do
  bin=${!v}
  d=$(mktemp -d)
  dirs[$v]=$d
  BOXD_SOCKET=$d/s.sock BOXD_HOME=$d/home BOXD_AUTOSTART=0 "$bin/boxd" >"$d/log" 2>&1 &
done
cleanup() {
  for v in old new; do
    bin=${!v} d=${dirs[$v]}
    BOXD_SOCKET=$d/s.sock "$bin/boxctl" rm -f ab >/dev/null 2>&1 || true
    BOXD_SOCKET=$d/s.sock "$bin/boxctl" daemon stop >/dev/null 2>&1 || true
  done
  rm -f "$out"
}
trap cleanup EXIT
sleep 1
image=$("$new/boxd-test-image")
for v in old new; do
  bin=${!v}
  BOXD_SOCKET=${dirs[$v]}/s.sock "$bin/boxctl" create --name ab "$image" >/dev/null
done
for _ in $(seq "$pairs"); do
  for v in old new; do
    bin=${!v}
    export BOXD_SOCKET=${dirs[$v]}/s.sock
    "$bin/boxctl" stop ab >/dev/null 2>&1 || true
    sleep 0.3
    t0=$(date +%s%N)
    said=$("$bin/boxctl" start ab 2>&1)
    t1=$(date +%s%N)
    ms=$(grep -o 'in [0-9]* ms' <<<"$said" | grep -o '[0-9]*')
    echo "$v $ms $(((t1 - t0) / 1000))" >>"$out"
  done
done
python3 - "$out" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
col = lambda v, i: [int(r[i]) for r in rows if r[0] == v]
for v in ("old", "new"):
    print(f"{v}: start p50 {st.median(col(v, 1))} ms (daemon), "
          f"{st.median(col(v, 2)) / 1000:.1f} ms (whole boxctl start)")
o, n = col("old", 1), col("new", 1)
print(f"new/old: p50 {st.median(n) / st.median(o):.2f}x, "
      f"median of the pairs {st.median([b / a for a, b in zip(o, n)]):.2f}x")
PY
