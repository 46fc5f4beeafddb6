#!/bin/sh
# macOS only. Assembles "Harness Box.app" around the XPC shim, signs it
# ad hoc (no entitlements), and with --smoke drives it: the bridge in the
# app sends host.describe, box.list and shutdown through the XPC service,
# which needs a running boxd (`boxctl daemon start`).
#
#   xpc/bundle.sh [--release] [--smoke]
#
# An XPC service in an app's Contents/XPCServices is reachable only from
# that app's own processes, so the bridge lives in Contents/MacOS.
set -eu
cd "$(dirname "$0")/.."
profile=debug flag=""
smoke=no
for a in "$@"; do
  case "$a" in
    --release) profile=release flag=--release ;;
    --smoke) smoke=yes ;;
    *) echo "usage: $0 [--release] [--smoke]" >&2; exit 2 ;;
  esac
done
[ "$(uname -s)" = Darwin ] || { echo "bundle.sh: macOS only" >&2; exit 2; }
cargo build $flag -p harness-box-xpc --bins
app="target/$profile/Harness Box.app"
svc="$app/Contents/XPCServices/com.qoder.harness-studio.box.xpc"
rm -rf "$app"
mkdir -p "$app/Contents/MacOS" "$svc/Contents/MacOS"
cp "target/$profile/harness-box-client" "$app/Contents/MacOS/"
cp "target/$profile/harness-box-service" "$svc/Contents/MacOS/"
cat >"$app/Contents/Info.plist" <<PLIST
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict>
  <key>CFBundleIdentifier</key><string>com.qoder.harness-studio</string>
  <key>CFBundleExecutable</key><string>harness-box-client</string>
  <key>CFBundlePackageType</key><string>APPL</string>
  <key>CFBundleName</key><string>Harness Box</string>
</dict></plist>
PLIST
cat >"$svc/Contents/Info.plist" <<PLIST
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><dict>
  <key>CFBundleIdentifier</key><string>com.qoder.harness-studio.box</string>
  <key>CFBundleExecutable</key><string>harness-box-service</string>
  <key>CFBundlePackageType</key><string>XPC!</string>
  <key>CFBundleName</key><string>com.qoder.harness-studio.box</string>
  <key>XPCService</key><dict><key>ServiceType</key><string>Application</string></dict>
</dict></plist>
PLIST
codesign --force --sign - --deep "$app"
echo "built $app"
[ "$smoke" = yes ] || exit 0

out=$(printf '%s\n' '{"id":1,"method":"host.describe"}' '{"id":2,"method":"box.list"}' '{"id":3,"method":"shutdown"}' |
  "$app/Contents/MacOS/harness-box-client")
echo "$out"
bridge=$$
echo "$out" | head -1 | grep -q '"type":"transport"' || { echo "smoke: no leading transport frame" >&2; exit 1; }
echo "$out" | grep -q '"id":1,"result"' || echo "$out" | grep -q '"id":1' || { echo "smoke: no host.describe reply" >&2; exit 1; }
echo "smoke: ok (transport frame first; servicePid is boxd's, bridgePid the XPC service's, not $bridge)"
