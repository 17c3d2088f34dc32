#!/bin/bash
# Runs fapolicyd confined to the benchmark's ramfs, then the opener; run as:
#   unshare -m --propagation private bash fapolicyd-run.sh <ramfs-dir> <file> <count> <uid> <gid> <opener> <errlog>
# Inside this private mount namespace: fapolicyd's config, database and run directories
# are fresh tmpfs mounts (the host's /etc/fapolicyd is never read or written), and
# watch_fs = ramfs, a type only the benchmark's mount has, so it marks nothing else.
# fapolicyd uses mount marks (allow_filesystem_mark = 0): it sees only opens made
# through the mounts of this namespace, which is where the opener runs. It runs as root:
# dropping to its own account (capng_change_id) is refused in this VM.
set -eu
D=$1 FILE=$2 N=$3 RUID=$4 RGID=$5 OPENER=$6 ERR=$7
mount -t tmpfs -o mode=0755 tmpfs /etc/fapolicyd
mkdir -p /etc/fapolicyd/rules.d /etc/fapolicyd/trust.d
cat > /etc/fapolicyd/fapolicyd.conf <<CONF
permissive = 0
nice_val = 14
q_size = 640
uid = root
gid = root
do_stat_report = 0
detailed_report = 0
db_max_size = 50
subj_cache_size = 1549
obj_cache_size = 8191
watch_fs = ramfs
trust = file
integrity = none
syslog_format = rule,dec,perm,auid,pid,exe,:,path,ftype,trust
rpm_sha256_only = 0
allow_filesystem_mark = 0
CONF
echo 'allow perm=any all : all' > /etc/fapolicyd/rules.d/10-allow-all.rules
cp /etc/fapolicyd/rules.d/10-allow-all.rules /etc/fapolicyd/compiled.rules
: > /etc/fapolicyd/fapolicyd.trust
mount -t tmpfs -o mode=0755 tmpfs /var/lib/fapolicyd
chown fapolicyd:fapolicyd /var/lib/fapolicyd
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/fapolicyd && chown fapolicyd:fapolicyd /run/fapolicyd
timeout -s KILL 120 fapolicyd --debug-deny --no-details 2>"$ERR" &
FPID=$!
trap 'kill $FPID 2>/dev/null; wait $FPID 2>/dev/null || true' EXIT
for i in $(seq 1 200); do
  grep -q 'Starting to listen' "$ERR" 2>/dev/null && break
  kill -0 $FPID 2>/dev/null || { echo "fapolicyd exited" >&2; cat "$ERR" >&2; exit 1; }
  sleep 0.1
done
grep -q 'Starting to listen' "$ERR" || { echo "fapolicyd not ready" >&2; exit 1; }
# Warm-up: fill fapolicyd's subject/object caches the way the other rows are warmed.
setpriv --reuid="$RUID" --regid="$RGID" --clear-groups "$OPENER" "$FILE" 2000 >/dev/null
# CPU the daemon spends on the measured opens: the sum of its threads' run time (ns).
C=$(pgrep -P $FPID)
cpu() { cat /proc/$C/task/*/schedstat | awk '{s+=$1} END {printf "%.0f", s}'; }
A=$(cpu)
setpriv --reuid="$RUID" --regid="$RGID" --clear-groups "$OPENER" "$FILE" "$N"
echo "cpu_ns $(( $(cpu) - A ))"
