#!/usr/bin/env bash
# BoxLite's "Run Pi" guide (https://docs.boxlite.ai/agent-in-box/run-pi),
# reproduced through boxd: a Node box boots, `npm install -g --ignore-scripts`
# installs pi into it (unpinned, as the guide does), `pi --version` answers,
# and one `pi -p` prompt returns. The prompt goes to a fake OpenAI-compatible
# server on loopback (tests/acp/fake-llm.mjs), so no API key is needed.
# Then the proof of concept's two extra figures: box reuse through
# harness-box-exec, and the first ACP reply from pi-acp on the warm box.
# Prints a timing table against the guide and the proof of concept.
#
# Runs its own daemon (release build) on its own home, target/run-pi/home,
# stopped at the end; the box `run-pi` is removed first so that every run
# starts from a fresh box. The first use of the image in that home unpacks
# it, which is timed as a step of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release}
export BOXD_HOME=${RUN_PI_HOME:-$PWD/target/run-pi/home}
unset BOXD_SOCKET
BOXCTL="$BIN/boxctl"
PROXY="$BIN/harness-box-exec"
BOX=run-pi
PI_ACP=pi-acp@0.0.34

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
say() { echo "run-pi: $*" >&2; }

say "building the Node image (cached after the first time)"
t=$(now); image=$(scripts/node-image.sh); image_s=$(secs "$t" "$(now)")

# Behind a TLS-intercepting proxy the host trusts an extra CA; so must the box.
ca_flags=() ca_env=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  ca_flags=(--mount "$NODE_EXTRA_CA_CERTS:/etc/ssl/host-extra-ca.crt:ro")
  ca_env=(-e NODE_EXTRA_CA_CERTS=/etc/ssl/host-extra-ca.crt)
fi

"$BOXCTL" daemon start >/dev/null
"$BOXCTL" rm --force "$BOX" >/dev/null 2>&1 || true

# The fake model server, stopped on exit.
llm_out=$(mktemp)
node tests/acp/fake-llm.mjs >"$llm_out" 2>/dev/null &
llm=$!
trap 'kill $llm 2>/dev/null || true; rm -f "$llm_out"; "$BOXCTL" daemon stop >/dev/null 2>&1 || true' EXIT
for _ in $(seq 100); do grep -q listening "$llm_out" && break; sleep 0.05; done
port=$(awk '{print $2}' "$llm_out")

say "unpacking the image into the daemon's cache (first use in this home only)"
t=$(now)
"$BOXCTL" create "$BOX-warm" --image "$image" >/dev/null
"$BOXCTL" rm --force "$BOX-warm" >/dev/null
unpack_s=$(secs "$t" "$(now)")

say "step 0: the box"
t0=$(now)
"$BOXCTL" create "$BOX" --image "$image" --memory-mib 2048 --disk-gb 8 \
  --allow-net registry.npmjs.org --allow-net host.boxd.internal "${ca_flags[@]}" \
  -e PI_OFFLINE=1 -e PI_SKIP_VERSION_CHECK=1 "${ca_env[@]}" >/dev/null
"$BOXCTL" start "$BOX" >/dev/null
up=$(now)

say "step 1: npm install -g --ignore-scripts @earendil-works/pi-coding-agent"
"$BOXCTL" exec "$BOX" -- npm install -g --ignore-scripts --no-audit --no-fund \
  @earendil-works/pi-coding-agent >&2
installed=$(now)
v_out=$(mktemp)
"$BOXCTL" exec "$BOX" -- pi --version >"$v_out" 2>&1
version=$(tr -d '\n' <"$v_out"); rm -f "$v_out"
versioned=$(now)

say "step 2: one prompt (to the fake model on the host, host.boxd.internal:$port, through the box's egress proxy)"
printf '{"providers":{"fake":{"baseUrl":"http://host.boxd.internal:%s/v1","api":"openai-completions","apiKey":"placeholder-not-a-key","models":[{"id":"fake-model"}]}}}' "$port" |
  "$BOXCTL" exec -i "$BOX" -- sh -c 'mkdir -p /root/.pi/agent && cat > /root/.pi/agent/models.json'
p0=$(now)
answer=$("$BOXCTL" exec "$BOX" -- sh -c 'pi -p "Write a one-line Python snippet that reverses a string." --provider fake --model fake-model --no-session < /dev/null')
prompted=$(now)
used=$("$BOXCTL" exec "$BOX" -- sh -c 'du -sxm / 2>/dev/null | cut -f1')

say "proof of concept: box reuse and the first ACP reply on a warm box"
r0=$(now)
"$PROXY" --raw --quiet --box "$BOX" -- true
reused=$(now)
"$BOXCTL" exec "$BOX" -- npm install -g --ignore-scripts --no-audit --no-fund "$PI_ACP" >/dev/null 2>&1
a0=$(now)
reply=$(printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{},"clientInfo":{"name":"run-pi","version":"0.1.0"}}}' |
  "$PROXY" --quiet --box "$BOX" -- pi-acp)
acp=$(now)
agent=$(printf '%s' "$reply" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const r=JSON.parse(s).result.agentInfo;console.log(r.name+" "+r.version)})')

engine=$("$BOXCTL" --json daemon status | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).daemon.engine))')
cat <<TABLE

pi ${version} answered; the prompt returned: ${answer}
ACP initialize answered by ${agent}; box writable layer ${used} MB; image $(du -sh "$image" | cut -f1) (build or cache check ${image_s} s; unpack on first use, or cache hit, plus a create and remove: ${unpack_s} s)

| step (cumulative from create)     | guide (microVM, macOS) | proof of concept (BoxLite, M4 Pro) | boxd here (${engine} engine) |
| --------------------------------- | ---------------------: | ---------------------------------: | ---------------------------: |
| box up                            |                   19 s |          6.23 s (boot, image cached) | $(secs "$t0" "$up") s |
| npm install -g pi done            |                   72 s |                      96.6 s (install) | $(secs "$t0" "$installed") s (install $(secs "$up" "$installed") s) |
| pi --version answered             |                      - |                               0.82 s | $(secs "$installed" "$versioned") s |
| prompt returned                   |                   77 s |                                    - | $(secs "$t0" "$prompted") s (prompt $(secs "$p0" "$prompted") s, fake model) |
| box reuse (harness-box-exec)      |                      - |                               0.82 s | $(secs "$r0" "$reused") s |
| first ACP reply on a warm box     |                      - |                               4.49 s | $(secs "$a0" "$acp") s |
TABLE
