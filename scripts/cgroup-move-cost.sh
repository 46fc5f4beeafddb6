#!/usr/bin/env bash
# What moving a process into a cgroup costs on this host: the first move
# after a pause waits for an RCU grace period (the kernel's
# cgroup_threadgroup_rwsem), the ones right after it do not. A box start
# makes one such move (the boot helper and the zygote together), so this is
# a floor under a box start here (docs/benchmarks.md, "Lean boxes").
# Run as root (or with a writable cgroup): scripts/cgroup-move-cost.sh [ROUNDS]
set -euo pipefail
rounds=${1:-5}
if [[ -d /sys/fs/cgroup/pids && ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
  base=/sys/fs/cgroup/pids            # cgroup v1 (or hybrid)
else
  base=/sys/fs/cgroup                 # cgroup v2
fi
dir=$base/boxd-move-cost.$$
mkdir "$dir"
trap 'rmdir "$dir"' EXIT
python3 - "$base" "$dir" "$rounds" <<'PY'
import sys, time
base, dir, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def move(to):
    t = time.perf_counter()
    with open(f"{to}/cgroup.procs", "w") as f:
        f.write("0")
    return (time.perf_counter() - t) * 1000
for _ in range(rounds):
    time.sleep(0.2)
    first, out, second = move(dir), move(base), move(dir)
    move(base)
    print(f"first move {first:6.2f} ms, the next ones {out:5.2f} / {second:5.2f} ms")
PY
