import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';

const unitPath = path.resolve(__dirname, '../../systemd/leash.service');
const hasAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;

function unitKeys(text: string): Map<string, string[]> {
  const m = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#') || t.startsWith('[')) continue;
    const i = t.indexOf('=');
    const k = t.slice(0, i);
    m.set(k, [...(m.get(k) ?? []), t.slice(i + 1)]);
  }
  return m;
}

describe('systemd unit', () => {
  const keys = unitKeys(fs.readFileSync(unitPath, 'utf8'));

  it('is a notify service with a watchdog, restarted on failure, torn down after stop', () => {
    expect(keys.get('Type')).toEqual(['notify']);
    expect(Number(keys.get('WatchdogSec')?.[0])).toBeGreaterThan(0);
    expect(keys.get('Restart')).toEqual(['on-failure']);
    expect(keys.get('ExecStopPost')).toEqual(['/usr/bin/leash teardown']);
  });

  it('ships no ExecReload (SIGHUP goes to the main PID only, from the CLI)', () => {
    expect(keys.has('ExecReload')).toBe(false);
  });

  it.skipIf(!hasAnalyze)('passes systemd-analyze verify with nothing on stderr', () => {
    // verify checks that ExecStart exists: give it a root holding the system's units and a stub binary,
    // so the host's /usr/bin is never touched.
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-unit-'));
    onTestFinished(() => fs.rmSync(root, { recursive: true, force: true }));
    fs.mkdirSync(path.join(root, 'usr/bin'), { recursive: true });
    fs.mkdirSync(path.join(root, 'etc/systemd/system'), { recursive: true });
    fs.mkdirSync(path.join(root, 'usr/lib/systemd'), { recursive: true });
    fs.cpSync('/lib/systemd/system', path.join(root, 'usr/lib/systemd/system'), { recursive: true });
    fs.writeFileSync(path.join(root, 'usr/bin/leash'), '#!/bin/sh\n', { mode: 0o755 });
    fs.copyFileSync(unitPath, path.join(root, 'etc/systemd/system/leash.service'));
    const r = spawnSync('systemd-analyze', ['verify', '--man=no', `--root=${root}`, 'leash.service'], {
      encoding: 'utf8',
    });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
