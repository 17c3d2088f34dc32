#!/bin/sh
# deploy/ checks CI can run (root not needed, nothing on this host changes):
#   1. ansible-lint on the role and the example playbook (production profile);
#   2. the role in check mode against localhost (connection local): the package task skipped, the
#      directory copy reported, and `leash apply --dry-run` of the directory run for real against a
#      scratch floor and state directory. Every file under the scratch directory is compared before
#      and after: check mode must write nothing.
# Needs ansible and ansible-lint (Debian 12: apt-get install -y ansible ansible-lint) and a built CLI.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
for b in ansible-lint ansible-playbook; do
  command -v "$b" >/dev/null || { echo "check-deploy: $b is not installed (apt-get install -y ansible ansible-lint)" >&2; exit 2; }
done
cli="$root/dist/src/cli/main.js"
[ -x "$cli" ] || { echo "check-deploy: $cli missing: npm run build" >&2; exit 2; }

cd "$root/deploy/ansible"
ansible-lint --offline roles/leash playbook.yml

tmp=$(mktemp -d /tmp/leash-check-deploy.XXXXXX)
log=$(mktemp /tmp/leash-check-deploy-log.XXXXXX)
trap 'rm -rf "$tmp" "$log"' EXIT
printf 'root:x:0:0:root:/root:/bin/sh\nfido:x:1000:1000::/home/fido:/bin/sh\nleash-coder:x:2101:2101::/home/leash-coder:/bin/sh\n' > "$tmp/passwd"
cat > "$tmp/leash.yaml" <<'YAML'
user: fido
network: { mode: whitelist, allow: ["github.com"] }
commands: { mode: blacklist, deny: ["ssh"] }
YAML
# The directory as a previous run left it on the host (so the dry run has something to judge).
mkdir -p "$tmp/dest"
cp -r "$root/deploy/examples/fleet/." "$tmp/dest/"
cat > "$tmp/play.yml" <<YAML
---
- name: Leash role in check mode
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: leash
      vars:
        leash_policy_src: "$root/deploy/examples/fleet"
        leash_policy_dir: "$tmp/dest"
        leash_bin: "$cli"
        leash_service: false
        leash_apply_environment:
          LEASH_CONFIG: "$tmp/leash.yaml"
          LEASH_PASSWD: "$tmp/passwd"
          LEASH_STATE_DIR: "$tmp/state"
          LEASH_PID_FILE: "$tmp/leash.pid"
YAML
# Files only: the directory's own mtime moves with the snapshot files themselves.
snap() { find "$tmp" -name 'snap.*' -prune -o -type f -printf '%p %s %T@ %m\n' | sort; ls -A "$tmp" "$tmp/dest" | grep -v '^snap\.'; }
snap > "$tmp/snap.before"
ANSIBLE_ROLES_PATH="$root/deploy/ansible/roles" ANSIBLE_NOCOLOR=1 ANSIBLE_LOCAL_TEMP="$tmp/.ansible-tmp" \
  ANSIBLE_REMOTE_TEMP="$tmp/.ansible-tmp" \
  ansible-playbook -i localhost, --check --diff "$tmp/play.yml" > "$log" 2>&1 || { cat "$log"; exit 1; }
cat "$log"
rm -rf "$tmp/.ansible-tmp"
snap > "$tmp/snap.after"
if ! diff "$tmp/snap.before" "$tmp/snap.after"; then echo "check-deploy: check mode changed files" >&2; exit 1; fi
grep -q 'Dry-run the profiles and bindings' "$log" || { echo "check-deploy: the dry run did not run" >&2; exit 1; }
echo "check-deploy: ok"
