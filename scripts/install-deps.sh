#!/usr/bin/env bash
# Installs what building and testing boxd needs, when it is missing.
# Idempotent; quiet when everything is there. Debian/Ubuntu (apt) only;
# elsewhere it says what to install.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have bwrap || need+=(bubblewrap)
have busybox && busybox --help >/dev/null 2>&1 || need+=(busybox-static)
have cc || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || [ -e /usr/lib/libc.a ] || need+=(libc6-dev)
have setpriv || need+=(util-linux)
# newuidmap/newgidmap: boxes of an unprivileged boxd get its subordinate ids.
have newuidmap || need+=(uidmap)
have pgrep || need+=(procps)
have cp || need+=(coreutils)
have curl || need+=(curl)
have protoc || need+=(protobuf-compiler)
have python3 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
# The Node image (scripts/node-image.sh) and the ACP tests.
have debootstrap || need+=(debootstrap)
have node || need+=(nodejs)
have npm || need+=(npm)
# The image tests: a real registry on loopback, pushed to with skopeo
# (htpasswd for the authenticated one); umoci for the pull benchmark.
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
have skopeo || need+=(skopeo)
have htpasswd || need+=(apache2-utils)
have umoci || need+=(umoci)
have tmux || need+=(tmux) # the escapes suite reads a real terminal (tests/tests/escapes/printed.rs)

if ! have cargo; then
  echo "cargo is missing: install Rust from https://rustup.rs (rustup, stable toolchain)" >&2
  exit 1
fi

[ ${#need[@]} -eq 0 ] && exit 0

if ! have apt-get; then
  echo "missing packages: ${need[*]}; install them with your package manager" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >&2
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
