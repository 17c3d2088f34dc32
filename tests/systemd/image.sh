#!/usr/bin/env bash
# Builds the Debian 12 image that tests/systemd boots with systemd as PID 1 (systemd-nspawn), once, and caches it.
#
#   sudo tests/systemd/image.sh [IMAGE]     (default $LEASH_SYSTEMD_IMAGE, else /var/tmp/leash-systemd/bookworm.img)
#
# The image is a sparse ext4 file: the container gets a filesystem of its own, so the fanotify marks Leash makes in
# it never reach the host's. Its root is `debootstrap --variant=minbase bookworm` from Debian's archive only (the
# mirror this host's apt uses; no NodeSource, no Node of the host's), with systemd and what the leash .deb depends
# on, installed by apt from that archive, and apt's lists of it: the suite's `apt install ./leash_*.deb` then runs
# with nothing but Debian's archive (the container has no network). A tests run copies the image and boots the copy.
# Idempotent: a stamp beside the image names the recipe it was built with; a changed recipe rebuilds it.
set -euo pipefail
IMG=$(realpath -m "${1:-${LEASH_SYSTEMD_IMAGE:-/var/tmp/leash-systemd/bookworm.img}}")
[ "$(id -u)" -eq 0 ] || { echo "systemd image: must run as root" >&2; exit 2; }
# What the image holds: the first list makes it boot, the second is what the package depends on (from the archive).
BOOT=systemd,systemd-sysv,dbus,init-system-helpers,util-linux,procps,iproute2
DEPS=nftables,openssl,logrotate,libstdc++6,libgcc-s1
# The fleet test applies deploy/ansible for real, with ansible-core inside (a local connection).
FLEET=ansible-core,python3-apt
RECIPE="2 $BOOT $DEPS $FLEET"
STAMP="$IMG.stamp"
mkdir -p "$(dirname "$IMG")"
exec 9>"$IMG.lock"
flock 9
if [ -f "$IMG" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$RECIPE" ]; then
  echo "$IMG"
  exit 0
fi
for t in debootstrap mkfs.ext4 systemd-nspawn; do
  command -v "$t" >/dev/null || { echo "systemd image: $t is missing (scripts/install-deps.sh installs it)" >&2; exit 2; }
done
rm -f "$IMG" "$STAMP"
tmp="$IMG.building"
mnt=$(mktemp -d /var/tmp/leash-systemd-build.XXXXXX)
cleanup() {
  for m in "$mnt/proc" "$mnt/sys" "$mnt/dev" "$mnt"; do
    mountpoint -q "$m" && umount "$m"
  done
  rmdir "$mnt" 2>/dev/null || true
  rm -f "$tmp"
}
trap cleanup EXIT
truncate -s 4G "$tmp"
mkfs.ext4 -q -F -L leash-systemd "$tmp"
mount -o loop "$tmp" "$mnt"
mirror=$(awk '/^URIs:/ && !/security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
security=${mirror%/debian}/debian-security
echo "systemd image: debootstrap bookworm from $mirror into $IMG" >&2
debootstrap --variant=minbase --include="$BOOT" bookworm "$mnt" "$mirror" >"$IMG.log" 2>&1 ||
  { tail -20 "$IMG.log" >&2; echo "systemd image: debootstrap failed (log: $IMG.log)" >&2; exit 1; }
cat >"$mnt/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
EOF
mount -t proc proc "$mnt/proc"
chroot "$mnt" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -ec "
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(echo "$DEPS,$FLEET" | tr , ' ')
  apt-get clean
" >>"$IMG.log" 2>&1 || { tail -20 "$IMG.log" >&2; echo "systemd image: apt in the image failed" >&2; exit 1; }
umount "$mnt/proc"
# A container of the test's own: a root without a password for nsenter, no getty on a console nobody reads, and a
# machine-id made at first boot.
echo leash-systemd >"$mnt/etc/hostname"
: >"$mnt/etc/machine-id"
ln -sf /dev/null "$mnt/etc/systemd/system/console-getty.service"
ln -sf /dev/null "$mnt/etc/systemd/system/getty@tty1.service"
# nspawn makes no /etc/resolv.conf with --resolv-conf=off: the proxy's resolver list must be readable.
printf 'nameserver 127.0.0.53\n' >"$mnt/etc/resolv.conf"
umount "$mnt"
mv "$tmp" "$IMG"
echo "$RECIPE" >"$STAMP"
echo "$IMG"
