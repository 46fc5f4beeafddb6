#!/usr/bin/env bash
# The SDKs' generated code, from proto/ and the generators pinned beside
# each SDK (grpcio-tools for Python, buf and ts-proto for TypeScript).
#
#   scripts/sdk.sh generate   write it into the SDKs (commit the result)
#   scripts/sdk.sh check      regenerate into a temporary directory and fail,
#                             with the diff, where the committed code differs
#
# For TypeScript the committed dist/ (the package as it installs, with no
# compiler) is rebuilt and compared too.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/sdk.sh generate|check}
ts=sdk/typescript
npm_ci() { (cd "$ts" && npm ci --no-audit --no-fund --ignore-scripts --silent); }

case $mode in
generate)
    sdk/python/generate.sh
    npm_ci
    (cd "$ts" && ./generate.sh && rm -rf dist && npx --no-install tsc -p tsconfig.json)
    ;;
check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    failed=0
    sdk/python/generate.sh "$tmp/python"
    diff -r -x __pycache__ sdk/python/src/boxd/_gen "$tmp/python" || failed=1
    npm_ci
    (cd "$ts" && ./generate.sh "$tmp/ts-gen")
    diff -r "$ts/src/gen" "$tmp/ts-gen" || failed=1
    (cd "$ts" && npx --no-install tsc -p tsconfig.json --outDir "$tmp/ts-dist")
    diff -r "$ts/dist" "$tmp/ts-dist" || failed=1
    if [ "$failed" != 0 ]; then
        echo "sdk: the generated code is not what proto/ makes: run 'make sdk' and commit the result" >&2
        exit 1
    fi
    echo "sdk: generated code is current (Python stubs, TypeScript src/gen and dist)"
    ;;
*)
    echo "usage: scripts/sdk.sh generate|check" >&2
    exit 2
    ;;
esac
