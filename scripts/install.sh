#!/usr/bin/env bash
# Installs Leash on a plain Debian 12 host: builds the .deb from this checkout and installs it. Only what the
# build and the service need is installed (install-deps.sh --build); the test suite's tools stay with .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
export npm_config_nodedir=/usr
bash scripts/install-deps.sh --build
npm ci --no-audit --no-fund
npm run build
deb=$(bash packaging/build-deb.sh "$(mktemp -d)")
# apt, not dpkg -i: the package's Depends (nftables, iproute2, ...) come from the archive.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$deb"
echo "installed: $deb"
echo "next: sudo leash init --user <agent-account> && sudo systemctl enable --now leash"
