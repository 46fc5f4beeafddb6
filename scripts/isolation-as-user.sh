#!/usr/bin/env bash
# Runs the isolation suite (tests/tests/isolation.rs), the host-side
# tools suite (tests/tests/host_tools.rs) and the escapes suite
# (tests/tests/escapes/) as an ordinary user, against a
# boxd of that user: what a person who installs boxd for themselves gets. Run as root (`make faults` does, when it runs as root);
# it makes the user `boxd-ci` (with a subordinate id range, as useradd
# gives one) if missing, and copies what the suite needs where that user
# can read it, since the checkout may sit in a private directory.
set -euo pipefail
cd "$(dirname "$0")/.."
user=${BOXD_CI_USER:-boxd-ci}
if [ "$(id -u)" -ne 0 ]; then
  echo "isolation-as-user: needs root (to make the user and switch to it); skipped" >&2
  exit 0
fi
if ! id "$user" >/dev/null 2>&1; then
  useradd -m -s /bin/sh "$user"
fi
grep -q "^$user:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$user"
grep -q "^$user:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$user"

cargo=${CARGO:-cargo}
suites="isolation host_tools escapes"
exe() {
  $cargo test --workspace --test "$1" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1"
}
bin=$(exe isolation)
profile=$(dirname "$(dirname "$bin")")
target=$(dirname "$profile")
node=$(scripts/node-image.sh)

# The suite finds its binaries and images next to itself.
stage=$(mktemp -d /var/tmp/boxd-isolation-XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/target/debug/deps" "$stage/target/test-images"
for suite in $suites; do
  cp "$(exe "$suite")" "$stage/target/debug/deps/$suite"
done
cp "$profile/boxd" "$profile/boxd-box" "$profile/boxctl" "$profile/harness-box-exec" "$stage/target/debug/"
# The busybox layouts and the probes exist once the suites ran as root.
cp -a "$target/test-images/." "$stage/target/test-images/"
cp -a "$node" "$stage/node"
# What the escapes suite's MCP client needs: its script and requirements
# (found through BOXD_TEST_WORKSPACE, since the checkout may be private);
# the user makes its own venv of the official SDK, with the system's
# Python (root's may be in a directory the user cannot reach).
mkdir -p "$stage/workspace/tests" "$stage/target/test-venvs"
cp -a tests/mcp "$stage/workspace/tests/"
chmod -R a+rX "$stage"
chmod 755 "$stage"
# The suites write next to themselves (hostile image variants, venv locks).
chown -R "$user" "$stage/target/test-images" "$stage/target/test-venvs"

cd /tmp
for suite in $suites; do
  echo "$suite suite as $user (uid $(id -u "$user")):"
  runuser -u "$user" -- env -i PATH="/usr/local/bin:/usr/bin:/bin:$PATH" HOME="$(getent passwd "$user" | cut -d: -f6)" \
    RUST_LOG="${RUST_LOG:-warn}" BOXD_NODE_IMAGE="$stage/node" BOXD_TEST_WORKSPACE="$stage/workspace" \
    "$stage/target/debug/deps/$suite" --test-threads 1 --nocapture
done
