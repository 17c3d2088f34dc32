#!/usr/bin/env bash
# System packages Leash's build, tests and demo need (Debian 12). Idempotent.
set -euo pipefail
need=()
for pkg in nftables iproute2 python3 make g++ openssl procps util-linux passwd fakeroot systemd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
