#!/usr/bin/env bash
# Builds leash_<version>_<arch>.deb from a built checkout (npm ci && npm run build done).
# Usage: packaging/build-deb.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-$PWD/dist-deb}"
version=$(node -p "require('./package.json').version")
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

lib="$stage/usr/lib/leash"
mkdir -p "$lib/build/Release" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/usr/share/leash" \
  "$stage/usr/share/doc/leash" "$stage/DEBIAN"
cp package.json package-lock.json "$lib/"
cp -r dist "$lib/dist"
cp build/Release/leash_native.node "$lib/build/Release/"
# Runtime dependencies only, from the lockfile already installed here (no network needed).
cp -r node_modules "$lib/node_modules"
(cd "$lib" && npm prune --omit=dev --no-audit --no-fund >/dev/null)
install -m 0755 packaging/leash-wrapper.sh "$stage/usr/bin/leash"
install -m 0644 systemd/leash.service "$stage/lib/systemd/system/leash.service"
install -D -m 0644 packaging/leash.logrotate "$stage/etc/logrotate.d/leash"
install -m 0644 packaging/leash.default.yaml "$stage/usr/share/leash/leash.default.yaml"
install -m 0644 README.md "$stage/usr/share/doc/leash/README.md"
install -m 0755 packaging/postinst "$stage/DEBIAN/postinst"
install -m 0755 packaging/prerm "$stage/DEBIAN/prerm"
size=$(du -sk "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CTL
Package: leash
Version: $version
Architecture: $arch
Maintainer: Leash developers <leash@localhost>
Depends: nodejs (>= 20), nftables, iproute2, util-linux, openssl
Installed-Size: $size
Section: admin
Priority: optional
Description: per-UID enforcement for local AI agents
 Leash makes a hard allow/block decision for everything an agent's Linux
 account does: network (nftables + transparent proxy), filesystem and
 commands (fanotify), and tools (MCP gate), with one policy engine.
CTL
mkdir -p "$out"
fakeroot dpkg-deb --build --root-owner-group "$stage" "$out/leash_${version}_${arch}.deb" >/dev/null
echo "$out/leash_${version}_${arch}.deb"
