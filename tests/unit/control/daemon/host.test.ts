// Host settings against files of the test's own (the real sysctl is changed only inside a PID namespace a test
// makes: tests/integration/host-memfd.test.ts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { applyHostSettings, memfdNoexecStatus, restoreHostSettings } from '../../../../src/control/daemon/host.js';
import { isLeashError } from '../../../../src/errors.js';

let dir = '';
let sysctl = '';
let stateFile = '';
const on = { host: { memfd_noexec: true, max_user_namespaces: false } };
const off = { host: { memfd_noexec: false, max_user_namespaces: false } };

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-host-'));
  sysctl = path.join(dir, 'memfd_noexec');
  stateFile = path.join(dir, 'run', 'host-settings.json');
  fs.writeFileSync(sysctl, '0\n');
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const value = () => fs.readFileSync(sysctl, 'utf8').trim();

describe('host.memfd_noexec', () => {
  it('sets 2 at start, records the value found, and restores it at stop', () => {
    const h = applyHostSettings(on, { memfdNoexec: sysctl, stateFile });
    expect(value()).toBe('2');
    expect(JSON.parse(fs.readFileSync(stateFile, 'utf8'))).toEqual({ memfd_noexec: { previous: 0 } });
    expect(h.restore()).toEqual([]);
    expect(value()).toBe('0');
    expect(fs.existsSync(stateFile)).toBe(false);
  });

  it('touches nothing when off', () => {
    const h = applyHostSettings(off, { memfdNoexec: sysctl, stateFile });
    expect(value()).toBe('0');
    expect(fs.existsSync(stateFile)).toBe(false);
    expect(h.restore()).toEqual([]);
    expect(value()).toBe('0');
  });

  it("after a crash the next start keeps the host's recorded value, not its own 2; teardown restores it", () => {
    fs.writeFileSync(sysctl, '1\n');
    applyHostSettings(on, { memfdNoexec: sysctl, stateFile }); // crashed: never restored
    expect(value()).toBe('2');
    const again = applyHostSettings(on, { memfdNoexec: sysctl, stateFile });
    expect(JSON.parse(fs.readFileSync(stateFile, 'utf8'))).toEqual({ memfd_noexec: { previous: 1 } });
    void again;
    expect(restoreHostSettings({ memfdNoexec: sysctl, stateFile })).toEqual([]);
    expect(value()).toBe('1');
  });

  it('leaves a value already at 2 as it is (nothing recorded, nothing restored)', () => {
    fs.writeFileSync(sysctl, '2\n');
    const h = applyHostSettings(on, { memfdNoexec: sysctl, stateFile });
    expect(fs.existsSync(stateFile)).toBe(false);
    h.restore();
    expect(value()).toBe('2');
  });

  it('a reload that switches it off restores; on again applies', () => {
    const h = applyHostSettings(off, { memfdNoexec: sysctl, stateFile });
    h.update(on);
    expect(value()).toBe('2');
    h.update(off);
    expect(value()).toBe('0');
  });

  it('refuses to start without kernel support: host_setting_failed (exit 3)', () => {
    fs.rmSync(sysctl);
    let err: unknown;
    try {
      applyHostSettings(on, { memfdNoexec: sysctl, stateFile });
    } catch (e) {
      err = e;
    }
    expect(isLeashError(err) && err.code).toBe('host_setting_failed');
    expect(isLeashError(err) && err.exitCode).toBe(3);
    expect(memfdNoexecStatus(on, sysctl)).toEqual({ configured: true, current: null, enforced: false });
  });
});
