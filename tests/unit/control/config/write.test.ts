import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Account } from '../../../../src/control/config/accounts.js';
import { loadConfig } from '../../../../src/control/config/load.js';
import { addEntry, atomicWrite, editConfig, setMode, withLock } from '../../../../src/control/config/write.js';
import { LeashError } from '../../../../src/errors.js';

const isRoot = process.getuid?.() === 0;
const accounts: Record<string, Account> = { fido: { name: 'fido', uid: 1234, gid: 4242, home: '/home/fido' } };
const lookup = (n: string) => accounts[n] ?? null;

function tmpConfig(text: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-write-'));
  onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'leash.yaml');
  fs.writeFileSync(file, text, { mode: 0o644 });
  return file;
}

const BASE = `# the floor
user: fido
network:
  mode: whitelist
  # reviewed 2026-11
  allow: [github.com] # code hosting
`;

describe('editConfig', () => {
  it('adds an entry, keeping comments and flow style', async () => {
    const file = tmpConfig(BASE);
    const r = await editConfig(file, (doc) => void addEntry(doc, 'network', 'allow', 'pypi.org'), { lookup });
    expect(r.changed).toBe(true);
    const text = fs.readFileSync(file, 'utf8');
    expect(text).toContain('# the floor');
    expect(text).toContain('# reviewed 2026-11');
    expect(text).toContain('# code hosting');
    expect(text).toContain('allow: [ github.com, pypi.org ]');
    expect(loadConfig(file, { lookup }).config.network.allow).toEqual(['github.com', 'pypi.org']);
  });

  it('creates a missing section', async () => {
    const file = tmpConfig('user: fido\n');
    await editConfig(file, (doc) => void addEntry(doc, 'commands', 'deny', 'ssh'), { lookup });
    expect(loadConfig(file, { lookup }).config.commands.deny).toEqual(['ssh']);
  });

  it('writes mode 0640 owned root:<leashed user primary group>, and re-states it on every write', async () => {
    const file = tmpConfig(BASE);
    fs.chmodSync(file, 0o666);
    await editConfig(file, (doc) => void setMode(doc, 'network', 'whitelist'), { lookup }); // no change
    let st = fs.statSync(file);
    expect(st.mode & 0o777).toBe(0o640);
    if (isRoot) expect([st.uid, st.gid]).toEqual([0, 4242]);
    await editConfig(file, (doc) => void setMode(doc, 'network', 'blacklist'), { lookup });
    st = fs.statSync(file);
    expect(st.mode & 0o777).toBe(0o640);
    if (isRoot) expect([st.uid, st.gid]).toEqual([0, 4242]);
  });

  it('group is root when no user is set', async () => {
    const file = tmpConfig('fail_mode: closed\n');
    await editConfig(file, (doc) => void addEntry(doc, 'network', 'allow', 'a.com'), { lookup });
    const st = fs.statSync(file);
    expect(st.mode & 0o777).toBe(0o640);
    if (isRoot) expect(st.gid).toBe(0);
  });

  it.each([
    ['network', 'allow', 'https://github.com/'],
    ['network', 'deny', 'evil.com/path'],
    ['filesystem', 'allow', 'relative/dir'],
    ['network', 'deny', 'bad host'],
  ] as const)('refuses to write inert entry %s.%s %j, file untouched', async (surface, list, entry) => {
    const file = tmpConfig(BASE);
    const before = fs.readFileSync(file, 'utf8');
    const err = await editConfig(file, (doc) => void addEntry(doc, surface, list, entry), { lookup }).catch((e) => e);
    expect(err).toBeInstanceOf(LeashError);
    expect(err.code).toBe('entry_inert');
    expect(err.details.inert_entries[0]).toMatchObject({ surface, list, entry });
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses an edit that would make the config invalid, file untouched', async () => {
    const file = tmpConfig(BASE);
    const before = fs.readFileSync(file, 'utf8');
    const err = await editConfig(file, (doc) => void doc.setIn(['network', 'mode'], 'greylist'), { lookup }).catch(
      (e) => e,
    );
    expect(err.code).toBe('config_invalid');
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses to edit a file that is already invalid', async () => {
    const file = tmpConfig('network:\n  alow: [x]\n');
    const err = await editConfig(file, (doc) => void addEntry(doc, 'network', 'allow', 'a.com'), { lookup }).catch(
      (e) => e,
    );
    expect(err.code).toBe('config_invalid');
  });

  it('a missing config is config_missing unless an initial text is given', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-write-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'leash.yaml');
    const err = await editConfig(file, () => {}, { lookup }).catch((e) => e);
    expect(err.code).toBe('config_missing');
    await editConfig(file, (doc) => void doc.set('user', 'fido'), { lookup, initialText: '# new\nuser: null\n' });
    expect(fs.readFileSync(file, 'utf8')).toContain('# new');
    expect(loadConfig(file, { lookup }).config.user).toBe('fido');
  });
});

describe('atomic write', () => {
  it('leaves the old file intact and no temp file when the write fails before the rename', async () => {
    const file = tmpConfig(BASE);
    const before = fs.readFileSync(file, 'utf8');
    let tmpSeen = '';
    const err = await editConfig(file, (doc) => void addEntry(doc, 'network', 'allow', 'pypi.org'), {
      lookup,
      beforeRename: (tmp) => {
        tmpSeen = tmp;
        // The temp file is complete and already has the final mode when the crash "happens".
        expect(fs.statSync(tmp).mode & 0o777).toBe(0o640);
        throw Object.assign(new Error('simulated ENOSPC'), { code: 'ENOSPC' });
      },
    }).catch((e) => e);
    expect(err.code).toBe('config_write_failed');
    expect(err.details.errno).toBe('ENOSPC');
    expect(fs.readFileSync(file, 'utf8')).toBe(before);
    expect(fs.existsSync(tmpSeen)).toBe(false);
    expect(fs.readdirSync(path.dirname(file)).sort()).toEqual(['leash.yaml']);
  });

  it('a failed write to a read-only location reports its errno', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-write-'));
    onTestFinished(() => fs.rmSync(dir, { recursive: true, force: true }));
    expect(() => atomicWrite(path.join(dir, 'no', 'such', 'leash.yaml'), 'x', { uid: 0, gid: 0 })).toThrow(
      expect.objectContaining({ code: 'config_write_failed' }),
    );
  });
});

describe('lock', () => {
  it('serialises concurrent writers: no update is lost', async () => {
    const file = tmpConfig('user: fido\nnetwork: { allow: [] }\n');
    const order: string[] = [];
    await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        editConfig(
          file,
          async (doc) => {
            order.push(`start${i}`);
            // Yield inside the critical section: without the lock the next writer would read the same file.
            await new Promise((r) => setTimeout(r, 15));
            addEntry(doc, 'network', 'allow', `h${i}.example.com`);
            order.push(`end${i}`);
          },
          { lookup },
        ),
      ),
    );
    expect(loadConfig(file, { lookup }).config.network.allow.sort()).toEqual(
      Array.from({ length: 6 }, (_, i) => `h${i}.example.com`).sort(),
    );
    // Strictly alternating start/end: no two critical sections overlapped.
    for (let i = 0; i < order.length; i += 2) {
      expect(order[i]!.replace('start', '')).toBe(order[i + 1]!.replace('end', ''));
    }
    expect(fs.existsSync(`${file}.lock`)).toBe(false);
  });

  it('breaks a stale lock left by a dead process', async () => {
    const file = tmpConfig('user: fido\n');
    const dead = spawn(process.execPath, ['-e', '0']);
    await new Promise((r) => dead.on('exit', r));
    fs.writeFileSync(`${file}.lock`, `${dead.pid}\n`);
    const r = await withLock(file, () => 'got it', 2_000);
    expect(r).toBe('got it');
    expect(fs.existsSync(`${file}.lock`)).toBe(false);
  });

  it('waits for a live holder, then times out with config_lock_timeout naming it', async () => {
    const file = tmpConfig('user: fido\n');
    const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)']);
    onTestFinished(() => void holder.kill('SIGKILL'));
    fs.writeFileSync(`${file}.lock`, `${holder.pid}\n`);
    const t0 = Date.now();
    const err = await withLock(file, () => 'never', 300).catch((e) => e);
    expect(err.code).toBe('config_lock_timeout');
    expect(err.details.pid).toBe(holder.pid);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    expect(fs.readFileSync(`${file}.lock`, 'utf8').trim()).toBe(String(holder.pid));
  });
});
