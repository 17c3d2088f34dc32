import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createReloadTracker, readReloadStatus, statusFilePath } from '../../../../src/control/reconcile/generation.js';

const tmp = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-gen-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  return path.join(dir, 'reconcile.json');
};

describe('reload generation', () => {
  it('writes each SIGHUP count at once, and done only from a finished reload covering it', () => {
    const file = tmp();
    const t = createReloadTracker(file);
    expect(readReloadStatus(file)).toMatchObject({ pid: process.pid, hup: 0, done: 0, phase: 'starting' });
    t.received();
    t.received();
    expect(readReloadStatus(file)).toMatchObject({ hup: 2, done: 0 });
    t.finished(2, [{ code: 'profile_invalid', message: 'x', account: 'leash-a' }], { filesystem: [1001] });
    expect(readReloadStatus(file)).toMatchObject({ done: 2, problems: [{ account: 'leash-a' }] });
    // A reload that finished late, covering fewer signals, never moves done back nor replaces the newer outcome.
    t.finished(1, []);
    expect(readReloadStatus(file)).toMatchObject({ done: 2, problems: [{ code: 'profile_invalid' }] });
    expect(fs.statSync(file).mode & 0o777).toBe(0o644);
  });

  it("removes only its own process's file", () => {
    const file = tmp();
    const t = createReloadTracker(file);
    fs.writeFileSync(file, JSON.stringify({ pid: 1, hup: 0, done: 0 }));
    t.remove();
    expect(fs.existsSync(file)).toBe(true);
    createReloadTracker(file).remove();
    expect(fs.existsSync(file)).toBe(false);
  });

  it('lives beside the pid file unless LEASH_STATUS_FILE says where', () => {
    expect(statusFilePath({})).toBe('/run/leash/reconcile.json');
    expect(statusFilePath({ LEASH_PID_FILE: '/tmp/x/leash.pid' })).toBe('/tmp/x/reconcile.json');
    expect(statusFilePath({ LEASH_STATUS_FILE: '/s.json', LEASH_PID_FILE: '/tmp/x/p' })).toBe('/s.json');
  });
});
