// The watcher process under its supervisor, on a tmpfs this test mounts, judged from
// the leashed accounts' side: EPERM where the policy says, nothing for anyone else.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fsCmdPolicyOf } from '../../src/dataplane/watcher/policy.js';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import type { FsCmdPolicy } from '../../src/native.js';
import { nativeAvailable } from '../../src/native.js';
import {
  buildSetuidOpener,
  copyBinaries,
  createUser,
  isEperm,
  mountTmpfs,
  runAs,
  runAsInOwnNs,
  runRoot,
  runCleanups,
  type Cleanup,
} from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const root = process.getuid?.() === 0 && nativeAvailable();

describe.skipIf(!root)('filesystem watcher process', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let bin: Record<string, string> = {};
  let suid = '';
  let loader = '';
  let decisions = '';
  let A: { name: string; uid: number; gid: number }; // whitelist subject
  let B: { name: string; uid: number; gid: number }; // blacklist subject
  let C: { name: string; uid: number; gid: number }; // another account, not a subject
  let polA: FsCmdPolicy;
  let polB: FsCmdPolicy;
  let sup: FsSupervisor;
  const stderr: string[] = [];

  const p = (...s: string[]): string => path.join(dir, ...s);

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER), 'run `npm run build` first').toBe(true);
    dir = mountTmpfs(cleanups);
    bin = copyBinaries(p('bin'), ['cat', 'ls', 'true']);
    fs.copyFileSync(bin.cat!, p('bin', 'kitty')); // a renamed cat
    fs.chmodSync(p('bin', 'kitty'), 0o755);
    loader = copyBinaries(p('bin'), ['/lib64/ld-linux-x86-64.so.2'])['ld-linux-x86-64.so.2']!;
    suid = buildSetuidOpener(p('bin'));
    for (const d of ['work', 'work/private', 'secret', 'pub', 'log']) fs.mkdirSync(p(d));
    fs.writeFileSync(p('work', 'a.txt'), 'inside');
    fs.writeFileSync(p('work', 'private', 'k'), 'private');
    fs.writeFileSync(p('secret', 's.txt'), 'secret');
    fs.writeFileSync(p('pub', 'p.txt'), 'public');
    fs.chmodSync(p('log'), 0o700);
    decisions = p('log', 'decisions.jsonl');
    A = createUser(cleanups);
    B = createUser(cleanups);
    C = createUser(cleanups);
    polA = {
      fail_mode: 'closed',
      // namespaces: allow, so the namespace the account makes below lives on to show how its opens are named
      // (under the default deny it is killed: tests/integration/watcher-namespaces.test.ts).
      filesystem: {
        mode: 'whitelist',
        allow: [p('work'), p('bin')],
        deny: [p('work', 'private')],
        namespaces: 'allow',
      },
      commands: { mode: 'whitelist', allow: ['cat', 'ls', p('bin', 'true'), 'suid-open'], deny: [] },
    };
    polB = {
      fail_mode: 'closed',
      filesystem: { mode: 'blacklist', allow: [], deny: [p('secret')] },
      commands: { mode: 'blacklist', allow: [], deny: ['ls', p('bin', 'true')] },
    };
    sup = createFsSupervisor({
      subjects: [
        { uid: A.uid, policy: polA, failMode: 'closed' },
        { uid: B.uid, policy: polB, failMode: 'closed' },
      ],
      decisions,
      wrap: ['timeout', '-s', 'KILL', '300'],
      script: WATCHER,
      env: { ...process.env, LEASH_TEST_WEDGE_JS: '1' },
      stderr: (s) => stderr.push(s),
    });
    cleanups.push(() => void sup.close());
    const st = await sup.ready;
    // One FAN_MARK_FILESYSTEM mark: the test's tmpfs, and nothing else on the host.
    expect(st.marks).toHaveLength(1);
    expect(st.marks[0]!.startsWith(dir)).toBe(true);
    expect(st.markErrors).toEqual([]);
  });
  afterAll(async () => {
    await sup?.close();
    runCleanups(cleanups);
  });

  it('whitelist: a read outside gets EPERM, inside succeeds, a deny inside wins', () => {
    expect(runAs(A, [bin.cat!, p('work', 'a.txt')])).toMatchObject({ code: 0, stdout: 'inside' });
    expect(isEperm(runAs(A, [bin.cat!, p('secret', 's.txt')]))).toBe(true);
    expect(isEperm(runAs(A, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    expect(isEperm(runAs(A, [bin.cat!, p('work', 'private', 'k')]))).toBe(true);
    // Directory listings are opens too (FAN_ONDIR).
    expect(runAs(A, [bin.ls!, p('work')]).code).toBe(0);
    expect(isEperm(runAs(A, [bin.ls!, p('secret')]))).toBe(true);
  });

  it('names files opened through its own mounts by readlink, with no renaming', async () => {
    runAs(A, [bin.cat!, p('work', 'a.txt')]);
    expect((await sup.status()).stats.foreignMount).toBe(0);
  });

  it('whitelist holds inside a user + mount namespace the account made itself', async () => {
    const r = runAsInOwnNs(A, `${bin.cat} ${p('work', 'a.txt')}; echo; ${bin.cat} ${p('secret', 's.txt')}`);
    expect(r.stdout).toContain('inside');
    expect(r.stdout).not.toContain('secret');
    expect(r.stderr).toMatch(/Operation not permitted/);
    // Its own bind mount of the secret directory is still the marked filesystem.
    const b = runAsInOwnNs(A, `mount --bind ${p('secret')} ${p('work')} && ${bin.cat} ${p('work', 's.txt')}`);
    expect(b.stdout).not.toContain('secret');
    expect(b.stderr).toMatch(/Operation not permitted/);
    // Those opens came through the namespace's own mounts and were renamed through ours.
    expect((await sup.status()).stats.foreignMount).toBeGreaterThan(0);
  });

  it('a symlink inside the whitelist to a file outside it is judged by the real path', () => {
    // The kernel resolves the link before the open: the event names the target, not the link.
    const link = p('work', 'to-secret');
    fs.symlinkSync(p('secret', 's.txt'), link);
    try {
      expect(isEperm(runAs(A, [bin.cat!, link]))).toBe(true);
      expect(runAs(A, [bin.cat!, p('work', 'a.txt')]).code).toBe(0);
    } finally {
      fs.rmSync(link, { force: true });
    }
  });

  it('blacklist blocks only what it lists', () => {
    expect(isEperm(runAs(B, [bin.cat!, p('secret', 's.txt')]))).toBe(true);
    expect(runAs(B, [bin.cat!, p('pub', 'p.txt')])).toMatchObject({ code: 0, stdout: 'public' });
    expect(runAs(B, [bin.cat!, p('work', 'a.txt')])).toMatchObject({ code: 0, stdout: 'inside' });
  });

  it('exec is allowed and denied by basename and by path', () => {
    expect(runAs(A, [bin.true!]).code).toBe(0); // allowed by path
    expect(isEperm(runAs(B, [bin.true!]))).toBe(true); // denied by path
    expect(isEperm(runAs(B, [bin.ls!, p('pub')]))).toBe(true); // denied by basename
    expect(runAs(B, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
  });

  it('a renamed binary is blocked under a commands whitelist', () => {
    const r = runAs(A, [p('bin', 'kitty'), p('work', 'a.txt')]);
    expect(isEperm(r)).toBe(true);
    expect(r.stdout).toBe('');
  });

  it('the loader trick is blocked: running ld-linux directly is an exec of the loader', () => {
    const r = runAs(A, [loader, p('bin', 'kitty'), p('work', 'a.txt')]);
    expect(isEperm(r)).toBe(true);
    expect(r.stdout).toBe('');
  });

  it('a setuid-root helper started by the account stays leashed', () => {
    const ok = runAs(A, [suid, p('work', 'a.txt')]);
    expect(ok).toMatchObject({ code: 0 });
    expect(ok.stdout).toContain(`ok euid=0 ruid=${A.uid}`);
    const no = runAs(A, [suid, p('secret', 's.txt')]);
    expect(no.stdout).toContain('EPERM euid=0');
  });

  it('root and other accounts are untouched', () => {
    for (const f of [p('secret', 's.txt'), p('work', 'private', 'k')]) {
      expect(runRoot([bin.cat!, f]).code).toBe(0);
      expect(runAs(C, [bin.cat!, f]).code).toBe(0);
    }
    expect(runAs(C, [p('bin', 'kitty'), p('pub', 'p.txt')])).toMatchObject({ code: 0, stdout: 'public' });
    expect(runAs(C, [loader, bin.cat!, p('pub', 'p.txt')])).toMatchObject({ code: 0, stdout: 'public' });
    expect(runAs(C, [suid, p('secret', 's.txt')]).stdout).toContain('ok');
  });

  it('writes each subject decision to the log opened before the marks', async () => {
    runAs(A, [bin.cat!, p('secret', 's.txt')]);
    await new Promise((r) => setTimeout(r, 200));
    const lines = fs
      .readFileSync(decisions, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toContainEqual(
      expect.objectContaining({
        uid: A.uid,
        surface: 'filesystem',
        action: 'block',
        reason: 'not_allowed',
        subject: { path: p('secret', 's.txt') },
      }),
    );
    expect(lines).toContainEqual(
      expect.objectContaining({ uid: B.uid, surface: 'commands', action: 'block', rule: 'ls' }),
    );
    expect(lines.every((l) => l.uid === A.uid || l.uid === B.uid)).toBe(true);
    for (const l of lines) {
      expect(l.ref).toMatch(/^[a-z2-7]{8}$/);
      expect(Math.abs(Date.parse(l.ts as string) - Date.now())).toBeLessThan(60_000);
    }
    expect(new Set(lines.map((l) => l.ref)).size).toBe(lines.length);
  });

  it('a filesystem mounted beneath a subject root later is found by the re-scan and judged', async () => {
    const sub = p('work', 'private', 'late');
    fs.mkdirSync(sub);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'mode=0755,size=1m', 'tmpfs', sub]);
    cleanups.push(() => execFileSync('umount', ['-l', sub]));
    fs.writeFileSync(path.join(sub, 'k'), 'late');
    const t0 = Date.now();
    let marks: string[] = [];
    while (Date.now() - t0 < 8000) {
      marks = (await sup.status()).marks;
      if (marks.includes(sub)) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(marks).toContain(sub);
    expect(Date.now() - t0).toBeLessThan(4500); // re-scan every 3 s
    expect(isEperm(runAs(A, [bin.cat!, path.join(sub, 'k')]))).toBe(true); // beneath the deny
    expect(runAs(B, [bin.cat!, path.join(sub, 'k')])).toMatchObject({ code: 0, stdout: 'late' });
  });

  it('the watcher opening a file on its own marked filesystem does not deadlock', async () => {
    const t0 = Date.now();
    const n = await sup.selfOpenForTest(p('secret', 's.txt'));
    expect(n).toBeGreaterThan(0);
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('a new subject is denied once set() resolves; no policy denies', async () => {
    expect(runAs(C, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
    await sup.set(C.uid, null, 'closed');
    expect(isEperm(runAs(C, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    await sup.set(C.uid, fsCmdPolicyOf({ ...emptyPolicy(), filesystem: { mode: 'blacklist', allow: [], deny: [] } }));
    expect(runAs(C, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
    await sup.set(C.uid, null, 'open');
    expect(runAs(C, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
  });

  it('a refused map change leaves the map as it was, and the next change goes through', async () => {
    await sup.set(C.uid, null, 'closed');
    expect(isEperm(runAs(C, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    // No filesystem or commands section: the watcher refuses it.
    const bad = { fail_mode: 'closed' } as unknown as FsCmdPolicy;
    await expect(sup.set(C.uid, bad)).rejects.toMatchObject({ code: 'watcher_failed' });
    expect(isEperm(runAs(C, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    // The refused entry used to stay in the watcher's own copy of the map and refuse every later change with it.
    await sup.set(4_000_000_002, null, 'closed');
    const open = fsCmdPolicyOf({ ...emptyPolicy(), filesystem: { mode: 'blacklist', allow: [], deny: [] } });
    await sup.set(C.uid, open);
    expect(runAs(C, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
    await sup.set(C.uid, null, 'closed');
  });

  it('many subjects in one map change: each in force once setMany resolves', async () => {
    const open = fsCmdPolicyOf({ ...emptyPolicy(), filesystem: { mode: 'blacklist', allow: [], deny: [] } });
    await sup.set(C.uid, open);
    expect(runAs(C, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
    const others = Array.from({ length: 200 }, (_, i) => ({
      uid: 4_000_100_000 + i,
      policy: null,
      failMode: 'closed' as const,
    }));
    const n0 = (await sup.status()).subjects;
    await sup.setMany([...others, { uid: C.uid, policy: null, failMode: 'closed' }]);
    expect(isEperm(runAs(C, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    expect((await sup.status()).subjects).toBe(n0 + others.length);
  });

  it('kill -9 of the watcher: respawned from the current map, enforcement back within 2 s', async () => {
    // A map change made before the kill must survive it.
    await sup.set(C.uid, null, 'closed');
    const old = sup.watcherPid()!;
    const deaths = sup.deaths();
    process.kill(old, 'SIGKILL');
    const t0 = Date.now();
    let back = false;
    while (Date.now() - t0 < 5000) {
      if (sup.deaths() > deaths && isEperm(runAs(A, [bin.cat!, p('secret', 's.txt')], 2000))) {
        back = true;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const took = Date.now() - t0;
    expect(back).toBe(true);
    expect(took).toBeLessThan(2000);
    expect(sup.watcherPid()).not.toBe(old);
    expect(isEperm(runAs(C, [bin.cat!, p('pub', 'p.txt')]))).toBe(true);
    expect(runAs(B, [bin.cat!, p('pub', 'p.txt')]).code).toBe(0);
  });

  it('a wedged JS side: other opens keep flowing, the watchdog exits in ~10 s, the service respawns it', async () => {
    const old = sup.watcherPid()!;
    const deaths = sup.deaths();
    stderr.length = 0;
    await sup.wedgeForTest();
    const t0 = Date.now();
    await new Promise((r) => setTimeout(r, 300));
    // Non-subjects are answered in native code; subjects are still judged there too.
    for (let i = 0; i < 3; i++) {
      const s = Date.now();
      expect(runRoot([bin.cat!, p('secret', 's.txt')]).code).toBe(0);
      expect(runAs(B, [bin.cat!, p('pub', 'p.txt')], 2000).code).toBe(0);
      expect(isEperm(runAs(A, [bin.cat!, p('secret', 's.txt')], 2000))).toBe(true);
      expect(Date.now() - s).toBeLessThan(1500);
    }
    while (sup.deaths() === deaths && Date.now() - t0 < 15_000) await new Promise((r) => setTimeout(r, 100));
    const diedAfter = Date.now() - t0;
    expect(sup.deaths()).toBe(deaths + 1);
    expect(diedAfter).toBeGreaterThan(8000);
    expect(diedAfter).toBeLessThan(13_000);
    const err = stderr.join('');
    expect(err).toMatch(/watchdog: the JavaScript side stalled/);
    expect(err).toMatch(/thread \d+ \(/);
    expect(err).toMatch(/wedgeForTest/);
    await sup.status();
    expect(sup.watcherPid()).not.toBe(old);
    expect(isEperm(runAs(A, [bin.cat!, p('secret', 's.txt')]))).toBe(true);
  }, 30_000);
});

function emptyPolicy() {
  const l = { mode: 'whitelist' as const, allow: [], deny: [] };
  return {
    fail_mode: 'closed' as const,
    network: l,
    filesystem: l,
    commands: { mode: 'blacklist' as const, allow: [], deny: [] },
    tools: { ...l, inspect: { secrets: 'block' as const, pii: 'log' as const, priv_esc: 'block' as const } },
  };
}

describe.skipIf(!root)('filesystem watcher supervisor', () => {
  it('gives up (watcher_failed) when the watcher dies more often than allowed', async () => {
    const cleanups: Cleanup[] = [];
    const dir = mountTmpfs(cleanups);
    try {
      let fatal: { code: string } | null = null;
      const sup = createFsSupervisor({
        subjects: [{ uid: 4_000_000_001, policy: null, failMode: 'closed' }],
        watch: [dir],
        decisions: path.join(dir, 'd.jsonl'),
        wrap: ['timeout', '-s', 'KILL', '60'],
        script: WATCHER,
        maxDeaths: 1,
        onFatal: (e) => (fatal = e),
      });
      cleanups.push(() => void sup.close());
      expect((await sup.ready).marks).toEqual([dir]);
      process.kill(sup.watcherPid()!, 'SIGKILL');
      await sup.status(); // respawned once
      expect(fatal).toBeNull();
      process.kill(sup.watcherPid()!, 'SIGKILL');
      const t0 = Date.now();
      while (!fatal && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 50));
      expect(fatal).toMatchObject({ code: 'watcher_failed' });
      await expect(sup.set(4_000_000_001, null)).rejects.toMatchObject({ code: 'watcher_failed' });
      await sup.close();
    } finally {
      runCleanups(cleanups);
    }
  });
});
