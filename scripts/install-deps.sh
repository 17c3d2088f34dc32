#!/usr/bin/env bash
# System packages Leash needs on Debian 12. Idempotent.
#   install-deps.sh --build   what building the .deb and running Leash need (scripts/install.sh, scripts/demo.sh)
#   install-deps.sh           that, plus the test suite's tools (.ci/run): nothing of these lands on a production host
set -euo pipefail
part=all
case "${1:-}" in
  --build) part=build ;;
  '') ;;
  *) echo "usage: install-deps.sh [--build]" >&2; exit 2 ;;
esac
need=()
want() {
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
  done
}
# Build and run: node-gyp's toolchain (python3, make, g++), the .deb's tools (dpkg-dev for dpkg-shlibdeps,
# fakeroot), and what the service and the demo run (nft, ip, openssl, mount). iptables: the network
# enforcer's fallback when nft is missing. The test suite fails, naming the program, when one of these is
# missing (tests/lab/prereq.ts).
want nftables iptables iproute2 python3 make g++ gcc openssl procps util-linux mount coreutils passwd fakeroot \
  systemd dpkg dpkg-dev libc-bin
if [ "$part" = all ]; then
  # The operations tests: logrotate (the shipped /etc/logrotate.d/leash), lintian (the .deb),
  # libnss-extrausers (a test NSS source for account discovery that leaves /etc/passwd alone),
  # zsh (the generated zsh completion is loaded and run), python3-seccomp (the service is run under
  # the unit's system-call filter without systemd).
  # chromium: the web console's browser tests (tests/integration/console-browser.test.ts, through playwright-core
  # pointed at /usr/bin/chromium; no browser is downloaded).
  want logrotate lintian libnss-extrausers zsh python3-seccomp chromium
  # deploy/ checks (scripts/check-deploy.sh, tests/e2e/deploy.test.ts): ansible and ansible-lint. The cost: about
  # 500 MB on disk (Debian's ansible ships every collection), and the check takes 1-3 minutes on a loaded 2-vCPU VM.
  want ansible ansible-lint
  # tests/systemd (Debian 12 booted with systemd as PID 1): systemd-nspawn and debootstrap for its image. Without
  # recommends: libnss-mymachines would add itself to /etc/nsswitch.conf.
  want systemd-container debootstrap
fi
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}"
fi

# Measured: libnss-mymachines (systemd-container's recommendation) edits /etc/nsswitch.conf; a machine that got it
# resolves every lookup through machined, which does not run here.
if dpkg-query -W -f='${Status}' libnss-mymachines 2>/dev/null | grep -q 'install ok installed'; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq libnss-mymachines
fi

# Node.js 20 builds and runs Leash; Debian 12's own nodejs is 18, too old (NodeSource or nodejs.org bring 20).
if ! command -v node >/dev/null 2>&1; then
  echo "install-deps: node not found: Leash needs Node.js >= 20 (Debian 12's nodejs package is 18)" >&2
  exit 2
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "install-deps: node $(node --version) is too old: Leash needs Node.js >= 20" >&2
  exit 2
fi
