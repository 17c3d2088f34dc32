// host.max_user_namespaces: the service's own code (src/control/daemon/host.ts, from the build) sets
// user.max_user_namespaces = 0 inside a user namespace this test makes (`unshare -U -r`: the value is per user
// namespace, and the namespace's creator holds CAP_SYS_RESOURCE in it), never on the host; then no process there
// can make a user namespace (so no filesystem of its own can be mounted), and the restore brings it back. The
// host's value is checked untouched.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_USER_NAMESPACES } from '../../src/control/daemon/host.js';

const root = process.getuid?.() === 0;
const HOST_JS = path.resolve(import.meta.dirname, '../../dist/src/control/daemon/host.js');

interface InNs {
  userns: string;
  before: number | null;
  during: number | null;
  nested: { code: number | null; stderr: string };
  status: { configured: boolean; current: number | null; enforced: boolean };
  problems: string[];
  after: number | null;
  nestedAfter: { code: number | null; stderr: string };
}

describe.skipIf(!root)('host.max_user_namespaces in a user namespace of the test', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-userns-'));
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('set to 0 at start: making a user namespace is refused (ENOSPC); restored at stop; the host untouched', () => {
    try {
      execFileSync('which', ['unshare'], { stdio: 'ignore' });
    } catch {
      throw new Error('this test needs unshare (util-linux) on the host');
    }
    if (!fs.existsSync(HOST_JS)) throw new Error(`${HOST_JS} is missing: run npm run build`);
    const hostValue = fs.readFileSync(MAX_USER_NAMESPACES, 'utf8');
    const hostUserns = fs.readlinkSync('/proc/self/ns/user');
    const script = `
      import { spawnSync } from 'node:child_process';
      import fs from 'node:fs';
      import { applyHostSettings, maxUserNamespacesStatus, readSysctl } from ${JSON.stringify(pathToFileURL(HOST_JS).href)};
      const userns = fs.readlinkSync('/proc/self/ns/user');
      // Never the host's value: refuse to write from the host's user namespace.
      if (userns === process.env.HOST_USERNS) { process.stdout.write('{"refused":"host user namespace"}'); process.exit(3); }
      const file = '/proc/sys/user/max_user_namespaces';
      const nest = () => {
        const r = spawnSync('unshare', ['-U', 'true'], { encoding: 'utf8', timeout: 10000, killSignal: 'SIGKILL' });
        return { code: r.status, stderr: r.stderr };
      };
      const config = { host: { memfd_noexec: false, max_user_namespaces: true } };
      const before = readSysctl(file);
      const host = applyHostSettings(config, { stateFile: process.env.STATE });
      const during = readSysctl(file);
      const nested = nest();
      const status = maxUserNamespacesStatus(config);
      const problems = host.restore();
      const after = readSysctl(file);
      const nestedAfter = nest();
      process.stdout.write(JSON.stringify({ userns, before, during, nested, status, problems, after, nestedAfter }));
    `;
    const r = spawnSync(
      'unshare',
      ['-U', '-r', '--fork', '--kill-child', process.execPath, '--input-type=module', '-e', script],
      {
        encoding: 'utf8',
        timeout: 30_000,
        killSignal: 'SIGKILL',
        env: { ...process.env, HOST_USERNS: hostUserns, STATE: path.join(dir, 'host-settings.json') },
      },
    );
    expect(r.status, r.stderr + r.stdout).toBe(0);
    const ns = JSON.parse(r.stdout) as InNs;
    expect(ns.userns).not.toBe(hostUserns);
    expect(ns.before).toBeGreaterThan(0);
    expect(ns.during).toBe(0);
    // util-linux: "unshare failed: No space left on device" (the kernel's ENOSPC for a namespace count over its limit).
    expect(ns.nested.code).not.toBe(0);
    expect(ns.nested.stderr).toMatch(/No space left on device/);
    expect(ns.status).toEqual({ configured: true, current: 0, enforced: true });
    expect(ns.problems).toEqual([]);
    expect(ns.after).toBe(ns.before);
    expect(ns.nestedAfter.code).toBe(0);
    expect(fs.existsSync(path.join(dir, 'host-settings.json'))).toBe(false);
    expect(fs.readFileSync(MAX_USER_NAMESPACES, 'utf8')).toBe(hostValue);
  });
});
