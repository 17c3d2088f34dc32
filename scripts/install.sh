#!/usr/bin/env bash
# Installs Leash on a plain Debian 12 host: builds the .deb from this checkout and installs it.
set -euo pipefail
cd "$(dirname "$0")/.."
export npm_config_nodedir=/usr
bash scripts/install-deps.sh
npm ci --no-audit --no-fund
npm run build
deb=$(bash packaging/build-deb.sh "$(mktemp -d)")
dpkg -i "$deb"
echo "installed: $deb"
echo "next: sudo leash init --user <agent-account> && sudo systemctl enable --now leash"
