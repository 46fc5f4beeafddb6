#!/usr/bin/env bash
# The VM suite, for a Linux host with working KVM: builds release, fetches
# the BoxLite runtime as `make test` does, runs every engine-parametrized
# end-to-end scenario (the `on_every_engine!` lists of tests/tests/*.rs,
# today tests/tests/daemon.rs) once per engine, and prints one table:
#
#   namespace        the `namespace::` half (Linux namespaces, any host)
#   boxlite local    the `microvm::` half: boxd --engine boxlite, VMs in boxd
#   boxlite remote   the `remote::` half: boxd's remote engine against
#                    a `boxlite serve` this script starts on 127.0.0.1
#                    (BOXD_TEST_BOXLITE_URL, BOXD_TEST_BOXLITE_API_KEY_FILE)
#
# each cell `ok 1.2s` or `FAIL 3.4s`, then a summary line.
#
# Usage: scripts/vm-suite.sh [OPTIONS]
#
#   --list            print the scenarios and engines it would run, and this
#                     host's VM verdict; builds nothing, runs nothing
#   --engines LIST    comma-separated subset of namespace,local,remote
#                     (default: all three; namespace alone needs no KVM)
#   --only REGEX      only the scenarios whose name matches (grep -E)
#   --jobs N          scenarios run at once, each its own test process
#                     (default: nproc)
#   --timeout SECS    per scenario run; past it the run is killed and FAILs
#                     (default: 180)
#   --results DIR     where logs go (default: target/vm-suite/DATE-TIME)
#   --no-build        use the test binaries already built (newest per target)
#   --profile NAME    cargo profile, release (default) or debug (debug is
#                     for trying the script out with --no-build)
#   --force           run the BoxLite columns even where the host checks
#                     say no VM can boot (they then fail; to try the script)
#   -h, --help        this text
#
# Before building anything it checks that this host can boot a VM (the
# checks of daemon/src/engine/boxlite/preflight.rs: /dev/kvm exists and
# opens read-write, no kvm_pvm module, vmx/svm when under a hypervisor, and
# `boxd doctor`'s engine line when a boxd is built); when it cannot, it says
# why and exits 3 within seconds. After the build it asks the fresh boxd's
# doctor again.
#
# Every scenario × engine runs as its own test process
# (`TESTBIN --exact NAME --include-ignored`), up to --jobs at once, one
# engine after the other; the time in a cell is that process's wall time.
# Logs: RESULTS/ENGINE/NAME.log, RESULTS/build.log, RESULTS/serve.log,
# and the table in RESULTS/table.md.
#
# `boxlite serve` (crate boxlite-cli 0.10.8) comes from
# scripts/boxlite-serve.sh, which builds it once (cached) and prints its
# path; else from BOXLITE_BIN, else `boxlite` on PATH. It runs with a scratch
# HOME and --home, a random API key (in a 0600 file, passed to it through
# BOXLITE_SERVE_API_KEY, not argv), and is stopped (SIGINT, then SIGKILL
# after 20 s) on every exit path.
#
# Exit status: 0 all ran and passed; 1 a failure (a scenario, the build, a
# setup step); 2 usage; 3 this host cannot boot a VM.
# Budget: 10 minutes on 16 cores, build included; the summary says when a
# run went over.
set -euo pipefail

# ---- one scenario run (internal: called through xargs) -------------------
# __one ENGINE EXE TEST OUTDIR TIMEOUT: runs TEST of the test binary EXE,
# writes OUTDIR/NAME.log and OUTDIR/NAME.result ("ok SECS" or "FAIL SECS
# [why]").
if [ "${1:-}" = __one ]; then
  engine=$2 exe=$3 test=$4 outdir=$5 limit=$6
  name=${test#*::}
  log="$outdir/$name.log"
  start=$(date +%s.%N)
  rc=0
  # The test harness finds target/PROFILE/boxd from the test binary's own
  # path; cargo runs test binaries from the package directory, so do we.
  # timeout runs the test in a process group of its own and, when it gets
  # SIGTERM, passes it on to that group: an interrupted suite stops its tests.
  (cd "$(dirname "$0")/../tests" && exec timeout --kill-after=10 "$limit" "$exe" --exact "$test" \
    --include-ignored --test-threads 1 --nocapture) >"$log" 2>&1 &
  tpid=$!
  trap 'kill -TERM "$tpid" 2>/dev/null; wait "$tpid"; exit 143' INT TERM
  wait "$tpid" || rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if [ "$rc" -eq 0 ] && grep -q '^test result: ok\. 1 passed' "$log"; then
    verdict="ok $secs"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    verdict="FAIL $secs timeout"
  elif [ "$rc" -eq 0 ]; then
    verdict="FAIL $secs not-run"
  else
    verdict="FAIL $secs"
  fi
  echo "$verdict" >"$outdir/$name.result"
  printf 'vm-suite: %-14s %-60s %s\n' "$engine" "$name" "$verdict" >&2
  exit 0
fi

cd "$(dirname "$0")/.."
ROOT=$PWD
SELF="$ROOT/scripts/vm-suite.sh"
# Set below, for the remote runs only.
unset BOXD_TEST_BOXLITE_URL BOXD_TEST_BOXLITE_API_KEY_FILE
T0=$(date +%s)

say() { echo "vm-suite: $*" >&2; }
die() { echo "vm-suite: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF"; }

# ---- options ---------------------------------------------------------------
LIST=0 BUILD=1 FORCE=0 ONLY='' PROFILE=release RESULTS=''
ENGINES=namespace,local,remote
JOBS=$(nproc 2>/dev/null || echo 4)
TIMEOUT=180
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --list) LIST=1 ;;
    --no-build) BUILD=0 ;;
    --force) FORCE=1 ;;
    --engines) ENGINES=${2:?--engines needs a list}; shift ;;
    --only) ONLY=${2:?--only needs a regex}; shift ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift ;;
    --results) RESULTS=${2:?--results needs a directory}; shift ;;
    --profile) PROFILE=${2:?--profile needs a name}; shift ;;
    *) echo "vm-suite: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $JOBS in '' | *[!0-9]* | 0) echo "vm-suite: --jobs wants a positive number" >&2; exit 2 ;; esac
case $TIMEOUT in '' | *[!0-9]* | 0) echo "vm-suite: --timeout wants seconds" >&2; exit 2 ;; esac
case $PROFILE in
  release) CARGO_PROFILE=(--release) ;;
  debug) CARGO_PROFILE=() ;;
  *) echo "vm-suite: --profile is release or debug" >&2; exit 2 ;;
esac
want_ns=0 want_local=0 want_remote=0
IFS=, read -r -a engine_list <<<"$ENGINES"
for e in "${engine_list[@]}"; do
  case $e in
    namespace) want_ns=1 ;;
    local) want_local=1 ;;
    remote) want_remote=1 ;;
    *) echo "vm-suite: unknown engine '$e' (namespace, local, remote)" >&2; exit 2 ;;
  esac
done
want_vm=$((want_local + want_remote))
BIN="$ROOT/target/$PROFILE"

# ---- can this host boot a VM? (cheap: nothing is built or booted) --------
# Prints the reason and fails when it cannot.
host_cannot_boot() {
  if [ "$(uname -s)" != Linux ]; then
    echo "this is $(uname -s), not Linux: the suite drives BoxLite on KVM"
    return 0
  fi
  if [ "$(uname -m)" != x86_64 ]; then
    echo "this is $(uname -m): the BoxLite runtime is fetched for Linux x86_64 only (scripts/boxlite-runtime.sh)"
    return 0
  fi
  if [ ! -e /dev/kvm ]; then
    echo "/dev/kvm does not exist: KVM is not available (enable hardware virtualization, load kvm_intel or kvm_amd)"
    return 0
  fi
  if [ -e /sys/module/kvm_pvm ] || grep -qw '^kvm_pvm' /proc/modules 2>/dev/null; then
    echo "KVM here is a paravirtual nested hypervisor (kvm_pvm module loaded), on which BoxLite's guest kernel stops with KVM_EXIT_INTERNAL_ERROR: no VM can boot on this host"
    return 0
  fi
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  if [ -n "$flags" ] && grep -qw hypervisor <<<"$flags" && ! grep -qwE 'vmx|svm' <<<"$flags"; then
    echo "KVM here runs inside a virtual machine without hardware virtualization extensions (no vmx/svm in /proc/cpuinfo): a paravirtual nested hypervisor, on which BoxLite's guest kernel stops"
    return 0
  fi
  if ! (exec 3<>/dev/kvm) 2>/dev/null; then
    echo "/dev/kvm cannot be opened read-write by $(id -un); add the user to the group owning /dev/kvm (usually kvm)"
    return 0
  fi
  # A boxd built before (perhaps stale) decides only when it says no; the
  # fresh one is asked again after the build.
  if [ -x "$BIN/boxd" ] && command -v python3 >/dev/null; then
    local why rc=0
    why=$(doctor_engine "$BIN/boxd") || rc=$?
    if [ "$rc" -eq 1 ]; then
      echo "$BIN/boxd doctor: $why"
      return 0
    fi
  fi
  return 1
}

# doctor_engine BOXD: prints the detail of `boxd doctor`'s engine line;
# exits 0 when its status is ok, 1 when not, 2 when there is no such line.
doctor_engine() {
  local out
  out=$("$1" doctor --json 2>/dev/null) || true
  python3 -c '
import json, sys
try:
    line = next(c for c in json.loads(sys.argv[1]) if c.get("name") == "engine")
except Exception as e:
    print(f"no engine line in its --json output ({e})")
    sys.exit(2)
print(line.get("detail", ""))
sys.exit(0 if line.get("status") == "ok" else 1)' "$out"
}

# ---- the scenarios ---------------------------------------------------------
# Test targets with an on_every_engine! list.
targets() {
  local f
  for f in tests/tests/*.rs; do
    grep -q '^on_every_engine!(' "$f" && basename "$f" .rs
  done
  return 0
}

# source_scenarios TARGET: the names in its on_every_engine!( ... ); list.
source_scenarios() {
  awk '/^on_every_engine!\(/ { on = 1; next }
       on && /^\);/ { on = 0 }
       on { sub(/\/\/.*/, ""); gsub(/[ \t,]/, ""); if ($0 != "") print }' "tests/tests/$1.rs"
}

only() { if [ -n "$ONLY" ]; then grep -E -- "$ONLY" || true; else cat; fi; }

mapfile -t TARGETS < <(targets)
[ ${#TARGETS[@]} -gt 0 ] || die "no on_every_engine! list in tests/tests/*.rs"

if [ "$LIST" = 1 ]; then
  echo "engines: $ENGINES (namespace = namespace::, local = microvm::, remote = remote::, both with --include-ignored)"
  for t in "${TARGETS[@]}"; do
    echo "tests/tests/$t.rs (cargo test ${CARGO_PROFILE[*]} -p boxd-tests --test $t):"
    source_scenarios "$t" | only | sed 's/^/  /'
  done
  if why=$(host_cannot_boot); then
    echo "this host: cannot boot a VM: $why"
  else
    echo "this host: the VM checks pass (the fresh boxd's doctor decides after the build)"
  fi
  exit 0
fi

if [ "$want_vm" -gt 0 ] && [ "$FORCE" = 0 ]; then
  if why=$(host_cannot_boot); then
    echo "vm-suite: this host cannot boot a VM, so the BoxLite columns cannot run: $why" >&2
    echo "vm-suite: nothing was built or run ($(($(date +%s) - T0))s); '--engines namespace' runs the namespace column alone" >&2
    exit 3
  fi
fi

# ---- set-up -----------------------------------------------------------------
RESULTS=${RESULTS:-$ROOT/target/vm-suite/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
say "results in $RESULTS"

SCRATCH=$(mktemp -d /tmp/vm-suite.XXXXXX)
SERVE_PID='' SERVE_BUILD_PID='' XARGS_PID=''
# shellcheck disable=SC2329 # invoked by the EXIT trap
cleanup() {
  local rc=$?
  if [ -n "$XARGS_PID" ]; then
    say "interrupted: stopping the running scenarios"
    kill -TERM -- -"$XARGS_PID" 2>/dev/null || true
    wait "$XARGS_PID" 2>/dev/null || true
  fi
  if [ -n "$SERVE_BUILD_PID" ] && kill -0 "$SERVE_BUILD_PID" 2>/dev/null; then
    kill -- -"$SERVE_BUILD_PID" 2>/dev/null || kill "$SERVE_BUILD_PID" 2>/dev/null || true
    wait "$SERVE_BUILD_PID" 2>/dev/null || true
  fi
  stop_serve
  rm -rf "$SCRATCH"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop_serve: SIGINT to the `boxlite serve` this script started (it stops
# its boxes, 10 s at most), SIGKILL to its process group after 20 s.
stop_serve() {
  [ -n "$SERVE_PID" ] || return 0
  local pid=$SERVE_PID i
  SERVE_PID=''
  if kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null || true
    for i in $(seq 200); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    [ "$i" -lt 200 ] || say "boxlite serve ignored SIGINT for 20 s; killing it"
  fi
  kill -KILL -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }'; }

if [ "$BUILD" = 1 ]; then
  scripts/install-deps.sh
fi
command -v python3 >/dev/null || die "python3 is needed (scripts/boxlite-runtime.sh, the doctor check)"

# The `boxlite serve` binary builds (once, cached) beside the workspace.
SERVE_BIN=''
serve_build_log="$RESULTS/boxlite-serve-build.log"
if [ "$want_remote" = 1 ]; then
  if [ -x scripts/boxlite-serve.sh ]; then
    say "building boxlite serve in the background (scripts/boxlite-serve.sh; log $serve_build_log)"
    set -m # its own process group, so that cleanup can stop its cargo
    scripts/boxlite-serve.sh >"$SCRATCH/serve-bin" 2>"$serve_build_log" &
    SERVE_BUILD_PID=$!
    set +m
  elif [ -n "${BOXLITE_BIN:-}" ]; then
    SERVE_BIN=$BOXLITE_BIN
  else
    # Until scripts/boxlite-serve.sh exists: a `boxlite` (boxlite-cli
    # 0.10.8) on PATH, e.g. from `cargo install boxlite-cli --version 0.10.8`.
    SERVE_BIN=$(command -v boxlite || true)
  fi
fi

if [ "$want_vm" -gt 0 ]; then
  say "fetching the BoxLite runtime (scripts/boxlite-runtime.sh, cached)"
  BOXLITE_RUNTIME_DIR="$(scripts/boxlite-runtime.sh)" || die "scripts/boxlite-runtime.sh failed"
  [ -n "$BOXLITE_RUNTIME_DIR" ] || die "scripts/boxlite-runtime.sh printed no runtime directory"
  export BOXLITE_RUNTIME_DIR
  say "BoxLite runtime: $BOXLITE_RUNTIME_DIR"
fi

t_build=$(now)
if [ "$BUILD" = 1 ]; then
  say "building (cargo build ${CARGO_PROFILE[*]} --workspace --bins; log $RESULTS/build.log)"
  cargo build "${CARGO_PROFILE[@]}" --workspace --bins >>"$RESULTS/build.log" 2>&1 \
    || { tail -n 30 "$RESULTS/build.log" >&2; die "the build failed (log $RESULTS/build.log)"; }
  test_args=()
  for t in "${TARGETS[@]}"; do test_args+=(--test "$t"); done
  say "building the tests (cargo test ${CARGO_PROFILE[*]} --no-run -p boxd-tests ${test_args[*]})"
  cargo test "${CARGO_PROFILE[@]}" --no-run -p boxd-tests "${test_args[@]}" --message-format=json \
    2>>"$RESULTS/build.log" >"$SCRATCH/artifacts.json" \
    || { tail -n 30 "$RESULTS/build.log" >&2; die "the test build failed (log $RESULTS/build.log)"; }
fi
build_s=$(since "$t_build")

# EXE[target]: the test binary of each target.
declare -A EXE
for t in "${TARGETS[@]}"; do
  if [ "$BUILD" = 1 ]; then
    exe=$(python3 - "$t" "$SCRATCH/artifacts.json" <<'EOF'
import json, sys
target, path = sys.argv[1], sys.argv[2]
for line in open(path):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and t.get("name") == target \
            and "test" in t.get("kind", []) and m.get("executable"):
        print(m["executable"])
EOF
    )
  else
    exe=$(find "$BIN/deps" -maxdepth 1 -type f -perm -u+x -name "$t-*" ! -name '*.*' \
      -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n1 | cut -d' ' -f2-)
  fi
  [ -n "$exe" ] && [ -x "$exe" ] || die "no test binary for tests/tests/$t.rs in $BIN (build it, or drop --no-build)"
  EXE[$t]=$exe
done
[ -x "$BIN/boxd" ] || die "$BIN/boxd is not built"

if [ "$want_vm" -gt 0 ]; then
  rc=0
  why=$(doctor_engine "$BIN/boxd") || rc=$?
  if [ "$rc" -eq 0 ]; then
    say "boxd doctor: $why"
  elif [ "$rc" -eq 2 ]; then
    die "$BIN/boxd doctor --json: $why"
  elif [ "$FORCE" = 1 ]; then
    say "boxd doctor says no VM can boot, running anyway (--force): $why"
  else
    echo "vm-suite: this host cannot boot a VM, so the BoxLite columns cannot run: $BIN/boxd doctor: $why" >&2
    exit 3
  fi
fi

# ---- the runs ----------------------------------------------------------------
# ROWS: "target name" for every scenario, in the order of the
# on_every_engine! list (then any the test binary has beyond it).
declare -A IN_NS IN_VM
ROWS=()
for t in "${TARGETS[@]}"; do
  list=$("${EXE[$t]}" --list 2>/dev/null) || die "${EXE[$t]} --list failed"
  while read -r n; do
    [ -z "$n" ] || IN_NS[$t $n]=1
  done < <(sed -n 's/^namespace::\(.*\): test$/\1/p' <<<"$list" | only)
  while read -r n; do
    [ -z "$n" ] || IN_VM[$t $n]=1
  done < <(sed -n 's/^microvm::\(.*\): test$/\1/p' <<<"$list" | only)
  declare -A seen=()
  while read -r n; do
    [ -n "$n" ] && [ -z "${seen[$n]:-}" ] || continue
    [ -n "${IN_NS[$t $n]:-}${IN_VM[$t $n]:-}" ] || continue
    seen[$n]=1
    ROWS+=("$t $n")
  done < <(source_scenarios "$t"; sed -n 's/^\(namespace\|microvm\)::\(.*\): test$/\2/p' <<<"$list")
  unset seen
done
[ ${#ROWS[@]} -gt 0 ] || die "no scenario matches${ONLY:+ --only $ONLY}"

declare -A WALL SETUP_FAIL
# run_engine ENGINE MODULE: every scenario of MODULE (namespace, microvm, remote),
# --jobs at once.
run_engine() {
  local engine=$1 module=$2 row t n
  local outdir="$RESULTS/$engine" jobs="$SCRATCH/$engine.jobs"
  mkdir -p "$outdir"
  : >"$jobs"
  for row in "${ROWS[@]}"; do
    t=${row%% *} n=${row#* }
    if [ "$module" = namespace ]; then
      [ -n "${IN_NS[$row]:-}" ] || continue
    else
      [ -n "${IN_VM[$row]:-}" ] || continue
    fi
    mkdir -p "$outdir/$t"
    printf '%s\0%s\0%s\0%s\0%s\0%s\0' __one "$engine" "${EXE[$t]}" "$module::$n" "$outdir/$t" "$TIMEOUT" >>"$jobs"
  done
  say "$engine: $(($(tr -cd '\0' <"$jobs" | wc -c) / 6)) scenarios, $JOBS at once, ${TIMEOUT}s each at most"
  local t0
  t0=$(now)
  # In a process group of its own, so that cleanup can stop the lot.
  set -m
  xargs -0 -n 6 -P "$JOBS" "$SELF" <"$jobs" &
  XARGS_PID=$!
  set +m
  wait "$XARGS_PID" || true
  XARGS_PID=''
  WALL[$engine]=$(since "$t0")
}

if [ "$want_ns" = 1 ]; then
  run_engine namespace namespace
fi


if [ "$want_local" = 1 ]; then
  run_engine local microvm
fi

# start_serve: a `boxlite serve` on a free loopback port, its key in a 0600
# file; sets SERVE_PID and exports BOXD_TEST_BOXLITE_URL and
# BOXD_TEST_BOXLITE_API_KEY_FILE, or sets SERVE_WHY and fails.
SERVE_WHY=''
start_serve() {
  if [ -n "$SERVE_BUILD_PID" ]; then
    say "waiting for scripts/boxlite-serve.sh"
    local rc=0
    wait "$SERVE_BUILD_PID" || rc=$?
    SERVE_BUILD_PID=''
    if [ "$rc" -ne 0 ]; then
      SERVE_WHY="scripts/boxlite-serve.sh failed (exit $rc; log $serve_build_log)"
      return 1
    fi
    SERVE_BIN=$(tail -n1 "$SCRATCH/serve-bin")
  fi
  if [ -z "$SERVE_BIN" ] || [ ! -x "$SERVE_BIN" ]; then
    SERVE_WHY="no boxlite binary: scripts/boxlite-serve.sh is missing and no 'boxlite' is on PATH (BOXLITE_BIN=PATH names one)"
    return 1
  fi
  if ! "$BIN/boxd" --help 2>/dev/null | grep -q -- '--boxlite-url'; then
    SERVE_WHY="$BIN/boxd has no --boxlite-url: the remote engine is not in this build"
    return 1
  fi
  if ! grep -rqs BOXD_TEST_BOXLITE_URL tests/src; then
    SERVE_WHY="the test harness (tests/src) does not read BOXD_TEST_BOXLITE_URL: the runs would be local ones"
    return 1
  fi
  local key keyfile="$SCRATCH/boxlite-api-key" port attempt i url authed anon
  key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077 && printf '%s' "$key" >"$keyfile")
  mkdir -p "$SCRATCH/serve-home" "$SCRATCH/boxlite-home"
  for attempt in 1 2 3; do
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url="http://127.0.0.1:$port"
    echo "== attempt $attempt: HOME=$SCRATCH/serve-home $SERVE_BIN serve --host 127.0.0.1 --port $port --home $SCRATCH/boxlite-home" >>"$RESULTS/serve.log"
    set -m # its own process group: SIGINT reaches it, cleanup can kill the group
    HOME="$SCRATCH/serve-home" BOXLITE_SERVE_API_KEY="$key" \
      "$SERVE_BIN" serve --host 127.0.0.1 --port "$port" --home "$SCRATCH/boxlite-home" \
      >>"$RESULTS/serve.log" 2>&1 </dev/null &
    SERVE_PID=$!
    set +m
    for i in $(seq 300); do
      kill -0 "$SERVE_PID" 2>/dev/null || break
      if curl -fsS -o /dev/null --max-time 1 "$url/v1/config" 2>/dev/null; then
        authed=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $key" "$url/v1/me" || true)
        anon=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$url/v1/me" || true)
        if [ "$authed" = 401 ] || [ "$anon" != 401 ]; then
          SERVE_WHY="boxlite serve on $url does not check its key as expected (GET /v1/me: $authed with it, $anon without)"
          return 1
        fi
        export BOXD_TEST_BOXLITE_URL=$url BOXD_TEST_BOXLITE_API_KEY_FILE=$keyfile
        say "boxlite serve (pid $SERVE_PID, $SERVE_BIN) answers on $url after $((i / 10)).$((i % 10))s"
        return 0
      fi
      sleep 0.1
    done
    stop_serve
  done
  SERVE_WHY="boxlite serve did not answer on 127.0.0.1 within 30 s (log $RESULTS/serve.log)"
  return 1
}

if [ "$want_remote" = 1 ]; then
  if start_serve; then
    run_engine remote remote
    stop_serve
    say "boxlite serve stopped"
  else
    SETUP_FAIL[remote]=$SERVE_WHY
    say "remote: not run: $SERVE_WHY"
  fi
fi

# ---- the table ---------------------------------------------------------------
COLS=() HEAD=()
[ "$want_ns" = 0 ] || { COLS+=(namespace); HEAD+=(namespace); }
[ "$want_local" = 0 ] || { COLS+=(local); HEAD+=("boxlite local"); }
[ "$want_remote" = 0 ] || { COLS+=(remote); HEAD+=("boxlite remote"); }

# cell ENGINE ROW: "ok 1.2s", "FAIL 3.4s", "FAIL 180.0s (timeout)", "-"
# (no such scenario for that engine), "FAIL (not run)".
cell() {
  local engine=$1 row=$2 t n f verdict secs why
  t=${row%% *} n=${row#* }
  if [ "$engine" = namespace ]; then
    [ -n "${IN_NS[$row]:-}" ] || { echo "-"; return; }
  else
    [ -n "${IN_VM[$row]:-}" ] || { echo "-"; return; }
  fi
  f="$RESULTS/$engine/$t/$n.result"
  if [ -n "${SETUP_FAIL[$engine]:-}" ] || [ ! -f "$f" ]; then
    echo "FAIL (not run)"
    return
  fi
  read -r verdict secs why <"$f"
  if [ "$verdict" = ok ]; then
    echo "ok ${secs}s"
  else
    echo "FAIL ${secs}s${why:+ ($why)}"
  fi
}

declare -A CELL COUNT_OK COUNT_ALL
FAILED_LOGS=()
width=8
for row in "${ROWS[@]}"; do
  if [ ${#TARGETS[@]} -gt 1 ]; then name="${row%% *}::${row#* }"; else name=${row#* }; fi
  [ ${#name} -le "$width" ] || width=${#name}
  for e in "${COLS[@]}"; do
    c=$(cell "$e" "$row")
    CELL[$e $row]=$c
    [ "$c" != - ] || continue
    COUNT_ALL[$e]=$((${COUNT_ALL[$e]:-0} + 1))
    case $c in
      ok*) COUNT_OK[$e]=$((${COUNT_OK[$e]:-0} + 1)) ;;
      *) [ -n "${SETUP_FAIL[$e]:-}" ] || FAILED_LOGS+=("$RESULTS/$e/${row%% *}/${row#* }.log") ;;
    esac
  done
done
wall_label="(wall time, $JOBS at once)"
[ ${#wall_label} -le "$width" ] || width=${#wall_label}

{
  printf "| %-${width}s |" scenario
  for h in "${HEAD[@]}"; do printf ' %-22s |' "$h"; done
  printf '\n| %s |' "$(printf '%*s' "$width" '' | tr ' ' -)"
  for _ in "${HEAD[@]}"; do printf ' %s |' "$(printf '%22s' '' | tr ' ' -)"; done
  printf '\n'
  for row in "${ROWS[@]}"; do
    if [ ${#TARGETS[@]} -gt 1 ]; then name="${row%% *}::${row#* }"; else name=${row#* }; fi
    printf "| %-${width}s |" "$name"
    for e in "${COLS[@]}"; do printf ' %-22s |' "${CELL[$e $row]}"; done
    printf '\n'
  done
  printf "| %-${width}s |" "$wall_label"
  for e in "${COLS[@]}"; do
    if [ -n "${SETUP_FAIL[$e]:-}" ]; then printf ' %-22s |' "not run"; else printf ' %-22s |' "${WALL[$e]:-?}s"; fi
  done
  printf '\n'
} >"$RESULTS/table.md"
cat "$RESULTS/table.md"

total=$(($(date +%s) - T0))
fail=0 parts=()
for i in "${!COLS[@]}"; do
  e=${COLS[$i]}
  ok=${COUNT_OK[$e]:-0} all=${COUNT_ALL[$e]:-0}
  [ "$ok" -eq "$all" ] || fail=1
  parts+=("${HEAD[$i]} $ok/$all")
done
echo
for e in "${COLS[@]}"; do
  [ -z "${SETUP_FAIL[$e]:-}" ] || echo "$e: not run: ${SETUP_FAIL[$e]}"
done
for l in "${FAILED_LOGS[@]}"; do echo "failed: $l"; done
counts=$(printf '%s, ' "${parts[@]}")
summary="${counts%, } ok; build ${build_s}s, total ${total}s; logs in $RESULTS"
[ "$total" -le 600 ] || summary="$summary; OVER the 10-minute budget"
if [ "$fail" = 0 ]; then
  echo "vm-suite: PASS: $summary"
else
  echo "vm-suite: FAIL: $summary"
fi
exit "$fail"
