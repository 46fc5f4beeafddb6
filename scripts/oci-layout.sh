#!/bin/sh
# Writes a one-layer OCI image layout.
# usage: oci-layout.sh LAYOUT_DIR LAYER.tar.gz DIFF_ID ENV_JSON CMD_JSON REF_NAME
set -eu
layout=$1 layer=$2 diff_id=$3 env=$4 cmd=$5 ref=$6
case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
blobs="$layout/blobs/sha256"
mkdir -p "$blobs"

# put FILE: moves FILE into the blob store, prints "DIGEST SIZE".
put() {
  d=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv "$1" "$blobs/$d"
  echo "$d $s"
}

set -- $(put "$layer"); layer_digest=$1 layer_size=$2
printf '{"architecture":"%s","os":"linux","config":{"Env":%s,"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$env" "$cmd" "$diff_id" >"$layout/config.json"
set -- $(put "$layout/config.json"); config_digest=$1 config_size=$2
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' \
  "$config_digest" "$config_size" "$layer_digest" "$layer_size" >"$layout/manifest.json"
set -- $(put "$layout/manifest.json"); manifest_digest=$1 manifest_size=$2
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s"},"platform":{"architecture":"%s","os":"linux"}}]}' \
  "$manifest_digest" "$manifest_size" "$ref" "$arch" >"$layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
