// A stop that is a restart keeps the data plane (src/control/daemon/restart.ts): systemd's restart job is looked up
// for the unit the service runs in, read from its cgroup, so a unit the operator copied or renamed is told apart too.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ownUnit, restartPending } from '../../../../src/control/daemon/restart.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-restart-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** A systemctl that prints `jobs` for list-jobs. */
function fakeSystemctl(jobs: string): string {
  const bin = path.join(dir, `systemctl-${Math.random().toString(36).slice(2)}`);
  fs.writeFileSync(bin, `#!/bin/sh\n[ "$1" = list-jobs ] && printf '%s\\n' '${jobs}'\nexit 0\n`, { mode: 0o755 });
  return bin;
}

describe('restart detection', () => {
  it("reads the unit from the process's cgroup", () => {
    expect(ownUnit(() => '0::/system.slice/leash.service\n')).toBe('leash.service');
    expect(ownUnit(() => '0::/system.slice/leash-lab.service\n')).toBe('leash-lab.service');
    // A delegated sub-cgroup of the service, and cgroup v1's numbered lines.
    expect(ownUnit(() => '0::/system.slice/agents.service/leash.service/payload\n')).toBe('leash.service');
    expect(ownUnit(() => '12:pids:/system.slice/other.service\n1:name=systemd:/system.slice/other.service\n')).toBe(
      'other.service',
    );
    // Not in a service (a login session), or no /proc: the packaged unit's name.
    expect(ownUnit(() => '0::/user.slice/user-0.slice/session-3.scope\n')).toBe('leash.service');
    expect(
      ownUnit(() => {
        throw new Error('ENOENT');
      }),
    ).toBe('leash.service');
  });

  it("a restart job for the service's own unit is a restart; one for another unit is not", () => {
    const env = {
      INVOCATION_ID: 'x',
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'), // no restart marker in this directory
      LEASH_SYSTEMCTL: fakeSystemctl('12 leash-lab.service restart running'),
    };
    expect(restartPending(env, 'leash-lab.service')).toBe('systemd-job');
    expect(restartPending(env, 'leash.service')).toBeNull();
    // A stop job is a deliberate stop; outside systemd (no INVOCATION_ID) systemd is not asked.
    expect(
      restartPending(
        { ...env, LEASH_SYSTEMCTL: fakeSystemctl('12 leash-lab.service stop running') },
        'leash-lab.service',
      ),
    ).toBeNull();
    expect(restartPending({ ...env, INVOCATION_ID: undefined }, 'leash-lab.service')).toBeNull();
  });
});
