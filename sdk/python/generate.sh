#!/usr/bin/env bash
# Generates the Python stubs of proto/proto/boxd/v1/boxd.proto into the
# package (src/boxd/_gen), or into OUTDIR when given (CI regenerates into a
# temporary directory and compares: `diff -r OUTDIR src/boxd/_gen`).
#
# The generator runs in a venv of its own, target/sdk-venvs/python-gen,
# made from the pinned requirements-gen.txt (again only when that file
# changes). The output depends only on the proto and those pins.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$here/src/boxd/_gen}"
venv="$root/target/sdk-venvs/python-gen"
reqs="$here/requirements-gen.txt"

if [[ ! -x "$venv/bin/python" ]] || ! cmp -s "$reqs" "$venv/requirements-gen.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
    cp "$reqs" "$venv/requirements-gen.txt"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" -m grpc_tools.protoc \
    -I"$root/proto/proto" \
    --python_out="$tmp" --pyi_out="$tmp" --grpc_python_out="$tmp" \
    boxd/v1/boxd.proto

mkdir -p "$out"
gen="$tmp/boxd/v1"
# The stubs live in the package `boxd._gen`: the service module imports the
# messages relatively, not as the top-level `boxd.v1` protoc assumes.
sed -e 's/^from boxd\.v1 import boxd_pb2 as /from . import boxd_pb2 as /' \
    "$gen/boxd_pb2_grpc.py" >"$out/boxd_pb2_grpc.py"
if grep -q '^from boxd\.v1 import' "$out/boxd_pb2_grpc.py"; then
    echo "generate.sh: an import of boxd.v1 is left in boxd_pb2_grpc.py" >&2
    exit 1
fi
cp "$gen/boxd_pb2.py" "$gen/boxd_pb2.pyi" "$out/"
cat >"$out/__init__.py" <<'PY'
"""Stubs generated from proto/proto/boxd/v1/boxd.proto by sdk/python/generate.sh.

Do not edit: run the script again after changing the proto.
"""
PY
