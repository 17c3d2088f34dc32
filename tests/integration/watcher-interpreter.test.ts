// A commands whitelist where the binary, its real dynamic loader and its libraries are all on
// the marked filesystem, as on a host whose root filesystem is marked: a small root of its own
// on the test's tmpfs, entered with `chroot --userspec` so every exec is the leashed account's.
// The kernel's exec-open of an allowed program's interpreter is allowed (`interpreter_of`);
// the loader run directly, a crafted PT_INTERP and a stale exec entry are not.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable, type FsCmdPolicy, type NativeWatcher } from '../../src/native.js';
import { parseDrain, type DrainedRecord } from '../native/helpers/drain.js';
import {
  buildMiniRoot,
  createUser,
  isEperm,
  mountTmpfs,
  resolveInRoot,
  runAsIn,
  runCleanups,
  type Cleanup,
} from './helpers/fslab.js';

const root = process.getuid?.() === 0 && nativeAvailable();
const HOST_LOADER = '/lib64/ld-linux-x86-64.so.2';

function need(bin: string): void {
  try {
    execFileSync('which', [bin], { stdio: 'ignore' });
  } catch {
    throw new Error(`this test needs ${bin} on the host`);
  }
}

describe.skipIf(!root)('commands whitelist: the interpreter of an allowed program (native watcher)', () => {
  const cleanups: Cleanup[] = [];
  let mini = '';
  let w: NativeWatcher;
  let records: DrainedRecord[] = [];
  let user: { name: string; uid: number; gid: number };
  let loader = '';
  let dash = '';

  // A path inside the small root as the watcher (in the host's namespace) names it.
  const at = (p: string): string => resolveInRoot(mini, p);

  beforeEach(() => {
    for (const b of ['chroot', 'ldd', 'cc']) need(b);
    const dir = mountTmpfs(cleanups, '128m');
    mini = path.join(dir, 'root');
    buildMiniRoot(mini, ['/bin/cat', '/bin/ls', '/bin/sh', '/bin/echo']);
    loader = at(HOST_LOADER);
    dash = at('/bin/sh');
    fs.writeFileSync(path.join(mini, 'work', 'a.txt'), 'inside');
    fs.writeFileSync(path.join(mini, 'work', 'build.sh'), '#!/bin/sh\necho built\n', { mode: 0o755 });
    fs.copyFileSync(path.join(mini, 'usr/bin/cat'), path.join(mini, 'work', 'mycat'));
    fs.chmodSync(path.join(mini, 'work', 'mycat'), 0o755);
    // A crafted ELF whose PT_INTERP names a program the whitelist denies.
    const src = path.join(dir, 'x.c');
    fs.writeFileSync(src, 'int main(void){return 0;}\n');
    execFileSync('cc', ['-o', path.join(mini, 'work', 'crafted'), src, '-Wl,--dynamic-linker=/usr/bin/ls']);
    // The stale-entry trick: an execve of an allowed program that fails after its exec-open
    // (a bad argv pointer: EFAULT), then the loader run directly on a denied program.
    const trick = path.join(dir, 'trick.c');
    fs.writeFileSync(
      trick,
      '#define _GNU_SOURCE\n#include <errno.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n' +
        'int main(void){execve("/usr/bin/cat",(char**)1,0);' +
        'char*a[]={"ld.so","/usr/bin/ls","/",0};execv("' +
        HOST_LOADER +
        '",a);printf("%s\\n",strerrorname_np(errno));return 1;}\n',
    );
    execFileSync('cc', ['-w', '-o', path.join(mini, 'work', 'trick'), trick]);

    user = createUser(cleanups);
    records = [];
    w = new (loadNative().Watcher)({ onRecords: () => records.push(...parseDrain(w.drain())), watchdogMs: 0 });
    cleanups.push(() => w.close());
    const guard = setTimeout(() => w.close(), 60_000);
    cleanups.push(() => clearTimeout(guard));
  });
  afterEach(() => runCleanups(cleanups));

  function policy(interpreters: string[] | undefined, allow: string[]): FsCmdPolicy {
    return {
      fail_mode: 'closed',
      filesystem: { mode: 'whitelist', allow: [mini], deny: [] },
      commands: { mode: 'whitelist', allow, deny: [], ...(interpreters ? { interpreters } : {}) },
    };
  }

  function start(p: FsCmdPolicy): void {
    w.setSubjects([{ uid: user.uid, failMode: 'closed', policy: p }]);
    w.mark(mini);
    w.start();
  }

  const drained = async (): Promise<DrainedRecord[]> => {
    await new Promise((r) => setTimeout(r, 150));
    records.push(...parseDrain(w.drain()));
    return records;
  };

  it('without commands.interpreters the loader of an allowed program is judged by name and blocks it', async () => {
    start(policy(undefined, [at('/usr/bin/cat')]));
    const r = runAsIn(mini, user, ['/usr/bin/cat', '/work/a.txt']);
    expect(r.code).not.toBe(0);
    const recs = await drained();
    expect(recs).toContainEqual(
      expect.objectContaining({ surface: 'commands', action: 'block', reason: 'not_allowed', subject: loader }),
    );
  });

  it('runs an allowed dynamic program and logs its loader as interpreter_of that program', async () => {
    start(policy([loader], [at('/usr/bin/cat')]));
    expect(runAsIn(mini, user, ['/usr/bin/cat', '/work/a.txt'])).toMatchObject({ code: 0, stdout: 'inside' });
    const recs = await drained();
    expect(recs).toContainEqual(
      expect.objectContaining({
        uid: user.uid,
        surface: 'commands',
        action: 'allow',
        reason: 'interpreter_of',
        subject: loader,
        interpreterOf: at('/usr/bin/cat'),
        rule: loader,
      }),
    );
    expect(w.stats().interpreterOf).toBeGreaterThan(0);
  });

  it('runs an allowed #! script whose interpreter is listed, and refuses that interpreter run directly', async () => {
    start(policy([loader, dash], [at('/usr/bin/cat'), path.join(mini, 'work', 'build.sh')]));
    expect(runAsIn(mini, user, ['/work/build.sh'])).toMatchObject({ code: 0, stdout: 'built\n' });
    const direct = runAsIn(mini, user, ['/bin/sh', '-c', 'echo direct']);
    expect(direct.code).not.toBe(0);
    expect(direct.stdout).not.toContain('direct');
    const recs = await drained();
    expect(recs).toContainEqual(expect.objectContaining({ action: 'allow', reason: 'interpreter_of', subject: dash }));
    expect(recs).toContainEqual(
      expect.objectContaining({ action: 'block', reason: 'interpreter_direct', subject: dash }),
    );
  });

  it('runs an allowed #! script whose interpreter is itself an allowed command', () => {
    start(policy([loader], [path.join(mini, 'work', 'build.sh'), dash]));
    expect(runAsIn(mini, user, ['/work/build.sh'])).toMatchObject({ code: 0, stdout: 'built\n' });
  });

  it('refuses the loader run directly, on an allowed and on a denied program (EPERM)', async () => {
    start(policy([loader], [at('/usr/bin/cat'), loader]));
    const onAllowed = runAsIn(mini, user, [HOST_LOADER, '/usr/bin/cat', '/work/a.txt']);
    expect(isEperm(onAllowed)).toBe(true);
    expect(onAllowed.stdout).toBe('');
    expect(isEperm(runAsIn(mini, user, [HOST_LOADER, '/usr/bin/ls', '/']))).toBe(true);
    const recs = await drained();
    expect(recs).toContainEqual(
      expect.objectContaining({ action: 'block', reason: 'interpreter_direct', subject: loader, rule: loader }),
    );
  });

  it('refuses a stale exec entry: a failed execve of an allowed program, then the loader run directly', async () => {
    start(policy([loader], [at('/usr/bin/cat'), path.join(mini, 'work', 'trick')]));
    const r = runAsIn(mini, user, ['/work/trick']);
    expect(r).toMatchObject({ code: 1, stdout: 'EPERM\n' });
    expect(w.stats().execStateRefused).toBeGreaterThan(0);
  });

  it('refuses a crafted ELF whose PT_INTERP names a denied program (EPERM)', async () => {
    start(policy([loader], [at('/usr/bin/cat'), path.join(mini, 'work', 'crafted')]));
    expect(isEperm(runAsIn(mini, user, ['/work/crafted']))).toBe(true);
    const recs = await drained();
    expect(recs).toContainEqual(
      expect.objectContaining({ action: 'block', reason: 'not_allowed', subject: at('/usr/bin/ls') }),
    );
  });

  it('judges an allowed ELF whose program headers cannot be read as the kernel reads them engine_error (EPERM)', async () => {
    const bad = path.join(mini, 'work', 'badelf');
    const b = fs.readFileSync(path.join(mini, 'usr/bin/cat'));
    b.writeUInt16LE(0x37, 54); // e_phentsize: not sizeof(Elf64_Phdr)
    fs.writeFileSync(bad, b, { mode: 0o755 });
    start(policy([loader], [at('/usr/bin/cat'), bad]));
    expect(isEperm(runAsIn(mini, user, ['/work/badelf']))).toBe(true);
    const recs = await drained();
    expect(recs).toContainEqual(
      expect.objectContaining({ surface: 'commands', action: 'block', reason: 'engine_error', subject: bad }),
    );
  });

  it('refuses a denied program and a renamed copy of an allowed one (EPERM)', () => {
    start(policy([loader], [at('/usr/bin/cat')]));
    expect(isEperm(runAsIn(mini, user, ['/usr/bin/ls', '/']))).toBe(true);
    expect(isEperm(runAsIn(mini, user, ['/work/mycat', '/work/a.txt']))).toBe(true);
    expect(runAsIn(mini, user, ['/usr/bin/cat', '/work/a.txt'])).toMatchObject({ code: 0, stdout: 'inside' });
  });
});
