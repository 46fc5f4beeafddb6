#!/bin/sh
# Generates the TypeScript code of boxd's API (src/gen/) from
# proto/proto/boxd/v1/boxd.proto with the tools pinned in package.json
# (buf, ts-proto; `npm ci` first). With OUTDIR, writes there instead, so a
# check can regenerate into a temporary directory and compare:
#
#   ./generate.sh /tmp/gen && diff -r src/gen /tmp/gen
#
# PROTO_DIR: where boxd/v1/boxd.proto is (default: the repository's
# proto/proto, for a copy of this package elsewhere).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=${PROTO_DIR:-"$here/../../proto/proto"}
out=${1:-"$here/src/gen"}
case $out in /*) ;; *) out="$(pwd)/$out" ;; esac
cd "$here"
if [ ! -x node_modules/.bin/buf ] || [ ! -x node_modules/.bin/protoc-gen-ts_proto ]; then
  echo "generate.sh: run \`npm ci\` in $here first (buf and ts-proto come from package.json)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# buf writes where the template says (src/gen); generate into a scratch
# copy of the template pointed at $tmp, then replace $out whole, so that a
# file no longer generated does not linger.
sed "s|out: src/gen|out: $tmp/gen|" buf.gen.yaml > "$tmp/buf.gen.yaml"
node_modules/.bin/buf generate "$proto" --template "$tmp/buf.gen.yaml"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
cp -R "$tmp/gen" "$out"
