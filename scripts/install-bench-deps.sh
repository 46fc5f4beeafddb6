#!/usr/bin/env bash
# Installs what `make bench` needs beyond scripts/install-deps.sh, when it is
# missing: podman and runc, the comparison in tests/benches/lifecycle.rs.
# Idempotent; quiet when everything is there. Debian/Ubuntu (apt) only;
# elsewhere it says what to install. `make test` does not run it.
#
# Without recommends: as root podman needs neither fuse-overlayfs (the
# kernel's overlay serves) nor slirp4netns (the bench runs `--network none`);
# rootless podman needs newuidmap (uidmap) and subuid ranges. The bench gives
# podman its own containers.conf and storage under a temporary directory,
# so nothing here configures podman.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have podman || need+=(podman)
have runc || need+=(runc)
have skopeo || need+=(skopeo)
have du || need+=(coreutils)
[ "$(id -u)" -eq 0 ] || have newuidmap || need+=(uidmap)

[ ${#need[@]} -eq 0 ] && exit 0

if ! have apt-get; then
  echo "missing packages for the benchmarks: ${need[*]}; install them with your package manager" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing (benchmarks): ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
