#!/usr/bin/env bash
# System packages Leash's build, tests and demo need (Debian 12). Idempotent.
set -euo pipefail
need=()
# iptables: the network enforcer's fallback when nft is missing (and its test). The test suite fails, naming the
# program, when one of these is missing (tests/lab/prereq.ts).
for pkg in nftables iptables iproute2 python3 make g++ gcc openssl procps util-linux mount coreutils passwd fakeroot systemd dpkg libc-bin; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
# The operations tests: logrotate (the shipped /etc/logrotate.d/leash), lintian and dpkg-dev
# (the .deb: lintian, dpkg-shlibdeps),
# libnss-extrausers (a test NSS source for account discovery that leaves /etc/passwd alone),
# zsh (the generated zsh completion is loaded and run), python3-seccomp (the service is run under
# the unit's system-call filter without systemd).
# chromium: the web console's browser tests (tests/integration/console-browser.test.ts, through playwright-core
# pointed at /usr/bin/chromium; no browser is downloaded).
for pkg in logrotate lintian dpkg-dev libnss-extrausers zsh python3-seccomp chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
# tests/systemd (Debian 12 booted with systemd as PID 1): systemd-nspawn and debootstrap for its image. Without
# recommends: libnss-mymachines would add itself to /etc/nsswitch.conf.
for pkg in systemd-container debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
# deploy/ checks (scripts/check-deploy.sh, tests/e2e/deploy.test.ts): ansible and ansible-lint. The cost: about
# 500 MB on disk (Debian's ansible ships every collection), and the check takes 1-3 minutes on a loaded 2-vCPU VM.
for pkg in ansible ansible-lint; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${need[@]}"
fi

# FIELD-NOTES: libnss-mymachines (systemd-container's recommendation) edits /etc/nsswitch.conf; a machine that got it
# resolves every lookup through machined, which does not run here.
if dpkg-query -W -f='${Status}' libnss-mymachines 2>/dev/null | grep -q 'install ok installed'; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq libnss-mymachines
fi

# Node.js 20 comes with this kind of machine (Debian 12's own nodejs is 18, too old for Leash).
if ! command -v node >/dev/null 2>&1; then
  echo "install-deps: node not found: Leash needs Node.js >= 20 (Debian 12's nodejs package is 18)" >&2
  exit 2
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "install-deps: node $(node --version) is too old: Leash needs Node.js >= 20" >&2
  exit 2
fi
