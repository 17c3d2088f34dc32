import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootContainer, type Container } from './container.js';
import { debFromCheckout } from './deb.js';

// The fleet path for real (issue 41): deploy/ansible's role applied by ansible-playbook with a local connection
// inside Debian 12 under systemd (tests/systemd/container.ts), on a host where Leash was never installed. Root only.
// LEASH_SYSTEMD_DEB reuses a built .deb; LEASH_SYSTEMD_IMAGE and LEASH_SYSTEMD_PREFIX as in transitions.test.ts.

const repo = path.resolve(__dirname, '../..');
const isRoot = process.getuid?.() === 0;
const prefix = process.env.LEASH_SYSTEMD_PREFIX ?? 'leash-systemd';
const image = process.env.LEASH_SYSTEMD_IMAGE ?? '/var/tmp/leash-systemd/bookworm.img';
// A file the agent may read by its mode, under a path the shipped floor denies (/etc/ssh).
const DENIED = '/etc/ssh/l40a_known_hosts';

describe.skipIf(!isRoot)('the Ansible role applied for real under systemd', () => {
  let c: Container;
  const play = () =>
    c.exec(
      [
        'env',
        'ANSIBLE_ROLES_PATH=/opt/l40a/deploy/ansible/roles',
        'ANSIBLE_NOCOLOR=1',
        'HOME=/root',
        'ansible-playbook',
        '-i',
        'localhost,',
        '/opt/l40a/play.yml',
      ],
      { timeoutMs: 600_000 },
    );
  const recap = (out: string) =>
    /^localhost\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)/m.exec(out);

  beforeAll(async () => {
    const img = spawnSync('bash', [path.join(__dirname, 'image.sh'), image], { encoding: 'utf8', timeout: 900_000 });
    expect(img.status, img.stderr).toBe(0);
    const deb = debFromCheckout(prefix);
    c = await bootContainer({ image, prefix, log: (s) => console.log(s) });
    const opt = path.join(c.root, 'opt/l40a');
    fs.mkdirSync(opt, { recursive: true });
    fs.copyFileSync(deb, path.join(c.root, 'var/tmp/leash.deb'));
    fs.cpSync(path.join(repo, 'deploy'), path.join(opt, 'deploy'), { recursive: true });
    fs.writeFileSync(
      path.join(opt, 'play.yml'),
      `---\n- name: Leash on an agent host\n  hosts: localhost\n  connection: local\n  gather_facts: false\n` +
        `  roles:\n    - role: leash\n      vars:\n        leash_deb_src: /var/tmp/leash.deb\n` +
        `        leash_policy_src: /opt/l40a/deploy/examples/fleet\n`,
    );
    fs.mkdirSync(path.join(c.root, 'etc/ssh'), { recursive: true, mode: 0o755 });
    fs.writeFileSync(path.join(c.root, DENIED.slice(1)), 'host key\n', { mode: 0o644 });
  }, 1_200_000);

  afterAll(async () => {
    await c?.close();
  }, 120_000);

  it('installs the package, applies the fleet directory, starts the service: its agent is confined', () => {
    expect(c.exec(['useradd', '--create-home', 'leash-coder']).code).toBe(0);
    // Unconfined before: the read below can fail only because of Leash.
    expect(c.exec(['runuser', '-u', 'leash-coder', '--', 'cat', DENIED]).code).toBe(0);
    const t0 = Date.now();
    const r = play();
    console.log(`fleet: first ansible-playbook run ${Date.now() - t0} ms: ${recap(r.out)?.[0]}`);
    expect(r.code, r.out + r.err).toBe(0);
    expect(Number(recap(r.out)?.[2])).toBeGreaterThan(0);
    expect(c.exec(['systemctl', 'is-active', 'leash']).out.trim()).toBe('active');
    expect(c.exec(['leash', 'bindings']).out).toMatch(/leash-coder/);
    const read = c.exec(['runuser', '-u', 'leash-coder', '--', 'cat', DENIED]);
    expect(read.code).not.toBe(0);
    expect(read.err).toMatch(/Operation not permitted/);
  }, 660_000);

  it('a second run changes nothing', () => {
    const r = play();
    console.log(`fleet: second ansible-playbook run: ${recap(r.out)?.[0]}`);
    expect(r.code, r.out + r.err).toBe(0);
    expect(recap(r.out)?.[2]).toBe('0');
    expect(recap(r.out)?.[4]).toBe('0');
  }, 660_000);
});
