#!/usr/bin/env bash
# Quick start: install what Leash needs, build it, and run `leash demo` with the shipped default
# policy. The demo builds its own network namespaces, tmpfs and demo account, and removes them all.
set -euo pipefail
cd "$(dirname "$0")/.."
export npm_config_nodedir=/usr
if [ "$(id -u)" -ne 0 ]; then
  echo "leash demo needs root (namespaces, nftables, fanotify): run it with sudo" >&2
  exit 2
fi
bash scripts/install-deps.sh --build
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run build >/dev/null
exec node dist/src/cli/main.js demo "$@"
