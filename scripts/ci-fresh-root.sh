#!/usr/bin/env bash
# Runs Leash's CI (`CI=true bash .ci/run`) in a chroot that looks like a NEW Debian 12 machine of this project's kind,
# to prove scripts/install-deps.sh installs everything the build and tests need (a green CI on a developer's machine
# can hide a package installed by hand).
#
#   sudo scripts/ci-fresh-root.sh [--root DIR] [--rebuild] [--timeout SECS] [--no-lock] REPO [COMMIT]
#   (for a quicker look: --no-clone reuses the last clone and its build, --cmd 'cd /ci/leash && npx vitest run F')
#
# The root (default /var/tmp/leash-fresh-root) is `debootstrap --variant=minbase bookworm` from the mirror that
# this host's apt uses, plus only what a new machine of this kind has beyond that: git and ca-certificates (apt), and
# the host's Node.js 20 + npm 11 (/usr/bin/node, /usr/lib/node_modules/{npm,corepack}, /usr/include/node) with npm set
# to build against /usr, and the machine's own CAs (/usr/local/share/ca-certificates). Nothing else: install-deps
# must bring nftables, iptables, python3, make, g++, ... itself.
# The root is built once and reused (a marker file says it is complete); --rebuild makes it anew. Packages that
# install-deps installed in an earlier run stay in the root: pass --rebuild to prove a clean install again.
# Each run clones REPO (a path or URL; COMMIT defaults to its HEAD) anew into DIR/ci/leash, and in a private mount
# namespace pivots into the root with /proc, /sys, /dev (+pts) and tmpfs /run and /tmp mounted, runs CI there under `timeout` (default 3600 s) as root with a clean
# environment and no stdin, prints the tail of the log (whole log: DIR/ci/ci.log), and exits with CI's status.
# The tests use fixed namespace and account names, so the run holds /tmp/leash-test.lock (the host's) throughout.
# On exit, always: processes still running in the run's namespace (started by this run) are killed by PID, and any
# mount left under the root on the host is unmounted.
set -euo pipefail

ROOT=/var/tmp/leash-fresh-root
REBUILD=0
TIMEOUT=3600
LOCK=1
CLONE=1
CMD='cd /ci/leash && bash .ci/run'
usage() {
  sed -n '6p' "$0" | sed 's/^# *//' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ROOT=${2:?--root needs a directory}; shift 2 ;;
    --rebuild) REBUILD=1; shift ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    --no-lock) LOCK=0; shift ;;
    --cmd) CMD=${2:?--cmd needs a command}; shift 2 ;;
    --no-clone) CLONE=0; shift ;;
    -h | --help) usage ;;
    -*) echo "ci-fresh-root: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || usage
REPO=$1
COMMIT=${2:-HEAD}
[ "$(id -u)" -eq 0 ] || { echo "ci-fresh-root: must run as root" >&2; exit 2; }
case "$TIMEOUT" in '' | *[!0-9]*) echo "ci-fresh-root: --timeout needs a whole number of seconds" >&2; exit 2 ;; esac
ROOT=$(realpath -m "$ROOT")
[ "$ROOT" != / ] || { echo "ci-fresh-root: --root must not be /" >&2; exit 2; }
MARK="$ROOT/.leash-fresh-root-complete"
log() { echo "ci-fresh-root: $*" >&2; }

# --- cleanup: kill what still runs in the run's mount namespace (or chrooted in the root), then unmount anything left
# under the root on the host (deepest first; normally nothing, the run's mounts live in its own namespace) ---
cleanup() {
  local rc=$? pid r pids=() m
  local ns
  ns=$(cat "$ROOT/ci/.mntns" 2>/dev/null || true)
  for pid in /proc/[0-9]*; do
    pid=${pid#/proc/}
    [ "$pid" != $$ ] || continue
    if [ -n "$ns" ] && [ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" = "$ns" ]; then
      pids+=("$pid")
      continue
    fi
    r=$(readlink "/proc/$pid/root" 2>/dev/null) || continue
    case "$r" in "$ROOT" | "$ROOT"/*) pids+=("$pid") ;; esac
  done
  if [ "${#pids[@]}" -gt 0 ]; then
    log "killing ${#pids[@]} process(es) left inside the root: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    sleep 1
  fi
  # Every mount point under the root, deepest first (ip netns files, tests' leftovers, ours).
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done < <(awk -v r="$ROOT" '{ gsub(/\\040/, " ", $5); if ($5 == r || index($5, r "/") == 1) print $5 }' /proc/self/mountinfo | sort -r)
  if awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
    log "WARNING: mounts remain under $ROOT"
  fi
  exit "$rc"
}

# The machine's own certificate authorities (/usr/local/share/ca-certificates): a new machine has them, and the
# registries are reached through them (without them npm fails with SELF_SIGNED_CERT_IN_CHAIN). Run on every use,
# so a root built before the host's CAs changed follows them.
machine_cas() {
  [ -d /usr/local/share/ca-certificates ] || return 0
  if ! diff -rq /usr/local/share/ca-certificates "$ROOT/usr/local/share/ca-certificates" >/dev/null 2>&1; then
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cp -a /usr/local/share/ca-certificates/. "$ROOT/usr/local/share/ca-certificates/"
    chroot "$ROOT" update-ca-certificates >/dev/null 2>&1
  fi
}

# --- build the root ---
build_root() {
  local mirror tmp
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap
  # The Debian mirror this host's apt uses (deb822 or one-line format), for the bookworm main suite.
  mirror=$(awk '/^URIs:/ && !/security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
  log "building $ROOT from $mirror (debootstrap --variant=minbase bookworm)"
  rm -rf --one-file-system "$ROOT"
  mkdir -p "$ROOT"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$ROOT" "$mirror" >"$ROOT.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOT.debootstrap.log" >&2; log "debootstrap failed (log: $ROOT.debootstrap.log)"; exit 1; }
  # The same apt sources as this host's Debian (updates and security too), nothing else.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$ROOT/etc/apt/sources.list.d/debian.sources"
    : >"$ROOT/etc/apt/sources.list"
  fi
  # No service starts inside the chroot when a package installs.
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
  # Node.js 20 + npm 11 and Node's headers, as the new machine has them (not Debian's: its nodejs is 18).
  tmp=$(mktemp)
  for p in /usr/bin/node /usr/bin/npm /usr/bin/npx /usr/bin/corepack /usr/lib/node_modules/npm \
    /usr/lib/node_modules/corepack /usr/include/node /usr/etc/npmrc; do
    [ -e "$p" ] || [ -L "$p" ] && echo "${p#/}" >>"$tmp"
  done
  grep -qx usr/bin/node "$tmp" || { rm -f "$tmp"; log "no /usr/bin/node on this host to copy"; exit 1; }
  tar -C / -cf - -T "$tmp" | tar -C "$ROOT" -xf -
  rm -f "$tmp"
  printf 'nodedir=/usr\n' >"$ROOT/root/.npmrc"
  machine_cas
  chroot "$ROOT" /usr/bin/node --version >/dev/null || { log "node does not run in the root"; exit 1; }
  date -u +%FT%TZ >"$MARK"
  log "root ready: node $(chroot "$ROOT" /usr/bin/node --version), npm $(chroot "$ROOT" /usr/bin/node /usr/lib/node_modules/npm/bin/npm-cli.js --version)"
}

if [ "$REBUILD" -eq 1 ] || [ ! -f "$MARK" ]; then
  # Never rebuild over live mounts.
  if awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
    log "mounts exist under $ROOT: unmount them first"
    exit 1
  fi
  build_root
else
  log "reusing $ROOT (built $(cat "$MARK"))"
  machine_cas
fi

# --- the clone: a fresh one each run ---
if [ "$CLONE" -eq 1 ]; then
  rm -rf --one-file-system "$ROOT/ci"
  mkdir -p "$ROOT/ci"
  git clone -q --no-hardlinks "$REPO" "$ROOT/ci/leash"
  git -C "$ROOT/ci/leash" checkout -q --detach "$COMMIT"
fi
rm -f "$ROOT/ci/.mntns"
log "testing $(git -C "$ROOT/ci/leash" log -1 --format='%h %s')"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"

# --- the run: its own mount namespace, the root pivoted to (not a chroot) ---
# A chroot will not do: the kernel refuses a user namespace to a chrooted process (EPERM; the watcher tests make one as
# the leashed account) and `ip netns exec` cannot `mount --make-rslave /` when / is no mount point. So the run gets a
# private mount namespace in which the root is bind-mounted on itself, /proc, /sys, /dev (+pts) and tmpfs /run and
# /tmp are mounted, and pivot_root makes it /. Every mount lives in that namespace only and goes with it.
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
CILOG="$ROOT/ci/ci.log"
# shellcheck disable=SC2016
INNER='set -e
R=$1 CMD=$2
mount --make-rprivate /
mount --bind "$R" "$R"
readlink /proc/self/ns/mnt >"$R/ci/.mntns"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=0755,size=1g tmpfs "$R/run"
mkdir -p "$R/run/netns" "$R/run/lock"
mount -t tmpfs -o mode=1777,size=4g tmpfs "$R/tmp"
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
cd /
exec /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root USER=root \
  LOGNAME=root SHELL=/bin/bash TERM=dumb CI=true /bin/bash -c "umount -l /.oldroot && rmdir /.oldroot && $CMD"'
run_ci() {
  timeout --kill-after=30 "$TIMEOUT" unshare --mount --propagation private /bin/bash -c "$INNER" inner "$ROOT" "$CMD" \
    </dev/null >"$CILOG" 2>&1 9>&-
}
start=$(date +%s)
set +e
if [ "$LOCK" -eq 1 ]; then
  log "waiting for /tmp/leash-test.lock"
  exec 9>/tmp/leash-test.lock
  flock 9 || { log "could not take /tmp/leash-test.lock"; exit 1; }
  run_ci
  rc=$?
  flock -u 9
else
  run_ci
  rc=$?
fi
set -e
log "---- last 60 lines of $CILOG ----"
tail -n 60 "$CILOG" >&2
[ "$rc" -ne 124 ] || log "CI timed out after ${TIMEOUT}s"
log "CI exit status $rc after $(($(date +%s) - start))s"
exit "$rc"
