import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isInside, openJail, realLocation, resolveCwd } from '../../../../src/tools/terminal/jail.js';

const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-term-jail-')));
afterAll(() => fs.rmSync(base, { recursive: true, force: true }));
const jail = path.join(base, 'jail');
fs.mkdirSync(path.join(jail, 'sub', 'deep'), { recursive: true });
fs.mkdirSync(path.join(base, 'jailbreak'));
fs.symlinkSync('/etc', path.join(jail, 'etc-link'));
fs.symlinkSync('sub/deep', path.join(jail, 'inner-link'));
fs.writeFileSync(path.join(jail, 'file'), '');

describe('cwd jail', () => {
  it('defaults to the jail root', () => expect(resolveCwd(jail, undefined)).toEqual({ ok: true, dir: jail }));
  it.each(['sub', 'sub/deep', './sub/../sub', 'inner-link', path.join(jail, 'sub')])('accepts %s', (cwd) => {
    expect(resolveCwd(jail, cwd).ok).toBe(true);
  });
  it.each([
    '..',
    '../jailbreak',
    'sub/../../jailbreak',
    '/etc',
    'etc-link',
    '/',
    'missing',
    'file',
    path.join(jail, '..'),
  ])('refuses %s', (cwd) => expect(resolveCwd(jail, cwd).ok).toBe(false));
  it('never takes /jailbreak for /jail', () => {
    expect(isInside('/a/jail', '/a/jailbreak')).toBe(false);
    expect(isInside('/a/jail', '/a/jail/x')).toBe(true);
  });
  it('requires the jail root to be an existing directory', () => {
    expect(() => openJail(path.join(base, 'nope'))).toThrow();
    expect(() => openJail(path.join(jail, 'file'))).toThrow();
    expect(() => openJail('')).toThrow();
  });
  it('locates a not-yet-existing file through a symlinked directory', () => {
    expect(realLocation(path.join(jail, 'inner-link', 'audit.jsonl'))).toBe(
      path.join(jail, 'sub', 'deep', 'audit.jsonl'),
    );
  });
});
