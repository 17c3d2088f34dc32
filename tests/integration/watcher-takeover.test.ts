// The respawn window, from the attacker's side: the active watcher is killed with SIGKILL a
// hundred times while a leashed account hammers a file its policy denies (and one it allows),
// and root hammers the denied file too. The standby watchers hold the same fanotify group and
// one takes over at once, so: the account never reads the denied file, no open waits more than a
// moment (nobody is left waiting on an event no one will answer), and root's opens all succeed.
// Then the two cases one standby left open: a standby killed with the active, and the new active
// killed before its own standby is ready.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fsCmdPolicyOf } from '../../src/dataplane/watcher/policy.js';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import { nativeAvailable } from '../../src/native.js';
import { createUser, mountTmpfs, runAs, runCleanups, isEperm, copyBinaries, type Cleanup } from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const root = process.getuid?.() === 0 && nativeAvailable();
const KILLS = Number(process.env.LEASH_TEST_KILLS ?? 100);
const ROUNDS = Math.max(5, Math.round(KILLS / 5));

/** open + read + close of one file until SIGTERM; prints ok, EPERM, other errors and the longest single open (ms). */
const HAMMER_C = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static void on(int s) { (void)s; stop = 1; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int c, char **v) {
  if (c < 2) return 2;
  signal(SIGTERM, on);
  long ok = 0, eperm = 0, other = 0; double worst = 0; int lastErr = 0; char b[1];
  while (!stop) {
    double t = now();
    int fd = open(v[1], O_RDONLY | O_CLOEXEC);
    double d = now() - t;
    if (d > worst) worst = d;
    if (fd >= 0) { if (read(fd, b, 1) >= 0) ok++; else other++; close(fd); }
    else if (errno == EPERM) eperm++;
    else if (errno != EINTR) { other++; lastErr = errno; }
  }
  printf("ok=%ld eperm=%ld other=%ld lasterr=%d worstms=%.1f\\n", ok, eperm, other, lastErr, worst);
  return 0;
}
`;

interface Tally {
  ok: number;
  eperm: number;
  other: number;
  lasterr: number;
  worstms: number;
}

function startHammer(argv: string[]): { child: ChildProcess; done: Promise<Tally> } {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  const done = new Promise<Tally>((resolve, reject) => {
    // 'close', not 'exit': the tally can still be in the pipe when the process has exited.
    child.on('close', (code, sig) => {
      const m = /ok=(\d+) eperm=(\d+) other=(\d+) lasterr=(\d+) worstms=([\d.]+)/.exec(out);
      if (!m) reject(new Error(`hammer ${argv.join(' ')} exited ${code ?? sig} without a tally: ${out}`));
      else resolve({ ok: +m[1]!, eperm: +m[2]!, other: +m[3]!, lasterr: +m[4]!, worstms: +m[5]! });
    });
  });
  return { child, done };
}

describe.skipIf(!root)('watcher takeover: no open through, no opener left waiting, while the watcher dies', () => {
  const cleanups: Cleanup[] = [];
  const hammers: ChildProcess[] = [];
  let dir = '';
  let logDir = '';
  let sup: FsSupervisor;
  let A: { name: string; uid: number; gid: number };
  const takeovers: boolean[] = [];
  const stderr: string[] = [];
  const p = (...s: string[]): string => path.join(dir, ...s);

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER), 'run `npm run build` first').toBe(true);
    dir = mountTmpfs(cleanups);
    for (const d of ['work', 'secret', 'bin']) fs.mkdirSync(p(d));
    // The decision log (a line per denied open: hundreds of MB here) on a tmpfs of its own, not marked.
    logDir = mountTmpfs(cleanups, '2g');
    fs.writeFileSync(p('work', 'a.txt'), 'inside');
    fs.writeFileSync(p('secret', 's.txt'), 'secret');
    fs.chmodSync(p('secret', 's.txt'), 0o644); // DAC lets everyone read it: only the watcher stands in the way
    copyBinaries(p('bin'), ['cat']);
    fs.writeFileSync(p('bin', 'hammer.c'), HAMMER_C);
    execFileSync('cc', ['-O2', '-o', p('bin', 'hammer'), p('bin', 'hammer.c')]);
    A = createUser(cleanups);
    sup = createFsSupervisor({
      subjects: [
        {
          uid: A.uid,
          policy: fsCmdPolicyOf({
            fail_mode: 'closed',
            filesystem: { mode: 'whitelist', allow: [p('work'), p('bin')], deny: [] },
            commands: { mode: 'blacklist', allow: [], deny: [] },
          }),
          failMode: 'closed',
        },
      ],
      decisions: path.join(logDir, 'decisions.jsonl'),
      wrap: ['timeout', '-s', 'KILL', '600'],
      script: WATCHER,
      maxDeaths: KILLS + 4 * ROUNDS + 10,
      onRespawn: (i) => takeovers.push(i.takeover),
      onFatal: (e) => stderr.push(`FATAL ${e.message}\n`),
      stderr: (s) => stderr.push(s),
    });
    cleanups.push(() => void sup.close());
    await sup.ready;
    await sup.standbyReady();
  }, 60_000);

  afterAll(async () => {
    const notes = stderr
      .join('')
      .split('\n')
      .filter((l) => l && !l.includes('DEP0168') && !l.includes('trace-deprecation'));
    const odd = notes.filter((l) => !l.includes('took over'));
    // What each takeover answered (allowed / denied / unrecorded), and anything else a watcher said.
    process.stdout.write(
      `watcher stderr (${notes.length} lines):\n${[...odd.slice(0, 20), ...notes.filter((l) => l.includes('took over')).map((l) => l.replace(/.*"allowed"/, 'took over: "allowed"'))].join('\n')}\n`,
    );
    for (const h of hammers) if (h.exitCode === null && h.signalCode === null) h.kill('SIGKILL');
    await sup?.close();
    runCleanups(cleanups);
  });

  it('before the kills: the account is refused the secret, root reads it', () => {
    expect(isEperm(runAs(A, [p('bin', 'cat'), p('secret', 's.txt')]))).toBe(true);
    expect(runAs(A, [p('bin', 'cat'), p('work', 'a.txt')]).code).toBe(0);
  });

  /** The three hammers while `kill` runs; their tallies once it is done. */
  async function underLoad(kill: () => Promise<void>): Promise<{ secret: Tally; work: Tally; rootT: Tally }> {
    const setpriv = (argv: string[]) => ['setpriv', `--reuid=${A.uid}`, `--regid=${A.gid}`, '--clear-groups', ...argv];
    const hSecret = startHammer(setpriv([p('bin', 'hammer'), p('secret', 's.txt')]));
    const hWork = startHammer(setpriv([p('bin', 'hammer'), p('work', 'a.txt')]));
    const hRoot = startHammer([p('bin', 'hammer'), p('secret', 's.txt')]);
    hammers.push(hSecret.child, hWork.child, hRoot.child);
    await kill();
    for (const h of [hSecret, hWork, hRoot]) h.child.kill('SIGTERM');
    const [secret, work, rootT] = await Promise.all([hSecret.done, hWork.done, hRoot.done]);
    return { secret, work, rootT };
  }

  /** What every run of kills must leave: nothing let through, nobody left waiting, enforcement intact. */
  function expectHeld({ secret, work, rootT }: { secret: Tally; work: Tally; rootT: Tally }): void {
    // The account never read the denied file, and was judged all along.
    expect(secret.ok).toBe(0);
    expect(secret.eperm).toBeGreaterThan(100);
    expect(secret.other).toBe(0);
    // Its allowed file kept working (an open in flight at a kill may be refused: fail closed).
    expect(work.ok).toBeGreaterThan(100);
    expect(work.other).toBe(0);
    // Root's opens all succeeded (its event in flight at a kill, recorded or still in the read area, is
    // allowed by the standby; docs/filesystem.md), and no opener waited on an event nobody answered.
    expect(rootT.eperm).toBe(0);
    expect(rootT.other).toBe(0);
    expect(rootT.ok).toBeGreaterThan(100);
    for (const t of [secret, work, rootT]) expect(t.worstms).toBeLessThan(3000);
    // And enforcement is intact afterwards.
    expect(isEperm(runAs(A, [p('bin', 'cat'), p('secret', 's.txt')]))).toBe(true);
    expect(runAs(A, [p('bin', 'cat'), p('work', 'a.txt')]).code).toBe(0);
  }

  const until = async (ok: () => boolean, what: string) => {
    const t0 = Date.now();
    while (!ok()) {
      if (Date.now() - t0 > 20_000) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 2));
    }
  };

  it(`${ROUNDS} x kill -9 of the active watcher and a standby at once: the other standby takes over`, async () => {
    const before = takeovers.length;
    const t = await underLoad(async () => {
      for (let i = 0; i < ROUNDS; i++) {
        await sup.standbyReady();
        await new Promise((r) => setTimeout(r, 20 + (i % 7) * 10));
        const victims = [sup.watcherPid()!, sup.standbyPid()!];
        const deaths = sup.deaths();
        for (const v of victims) process.kill(v, 'SIGKILL');
        await until(() => sup.deaths() >= deaths + 2 && takeovers.length > before + i, 'the takeover');
        expect(victims).not.toContain(sup.watcherPid());
      }
    });
    process.stdout.write(`active and standby at once, ${ROUNDS} rounds: ${JSON.stringify(t)}\n`);
    // Each round was a takeover (the group never closed: no respawn from the map).
    expect(takeovers.slice(before)).toEqual(Array(ROUNDS).fill(true));
    expectHeld(t);
  }, 400_000);

  it(`${ROUNDS} x kill -9 of the new active right after a takeover, before its standby is replaced`, async () => {
    const before = takeovers.length;
    const t = await underLoad(async () => {
      for (let i = 0; i < ROUNDS; i++) {
        await sup.standbyReady();
        await new Promise((r) => setTimeout(r, 20 + (i % 7) * 10));
        const first = sup.watcherPid()!;
        const n = takeovers.length;
        process.kill(first, 'SIGKILL');
        await until(() => takeovers.length > n, 'the first takeover');
        const heir = sup.watcherPid()!;
        expect(heir).not.toBe(first);
        process.kill(heir, 'SIGKILL');
        await until(() => takeovers.length > n + 1, 'the second takeover');
        expect([first, heir]).not.toContain(sup.watcherPid());
      }
    });
    process.stdout.write(`new active killed after a takeover, ${ROUNDS} rounds: ${JSON.stringify(t)}\n`);
    expect(takeovers.slice(before)).toEqual(Array(2 * ROUNDS).fill(true));
    expectHeld(t);
  }, 400_000);

  it(`${KILLS} x kill -9 of the active watcher under load: every death is a takeover, nothing let through`, async () => {
    const before = takeovers.length;
    const t0 = Date.now();
    const gaps: number[] = [];
    const t = await underLoad(async () => {
      for (let i = 0; i < KILLS; i++) {
        await sup.standbyReady();
        await new Promise((r) => setTimeout(r, 20 + (i % 7) * 10)); // land the kill at varying points of the loop
        const victim = sup.watcherPid()!;
        const deaths = sup.deaths();
        const k = Date.now();
        process.kill(victim, 'SIGKILL');
        while (sup.deaths() === deaths) await new Promise((r) => setTimeout(r, 5));
        gaps.push(Date.now() - k);
        expect(sup.watcherPid()).not.toBe(victim);
      }
    });
    const elapsed = Date.now() - t0;
    const st = await sup.status();
    process.stdout.write(
      `takeover: ${KILLS} kills in ${(elapsed / 1000).toFixed(1)} s; ` +
        `subject->secret ${JSON.stringify(t.secret)}; subject->work ${JSON.stringify(t.work)}; root->secret ${JSON.stringify(t.rootT)}; ` +
        `supervisor saw each death after ${Math.min(...gaps)}-${Math.max(...gaps)} ms; last watcher stats ${JSON.stringify(st.stats)}\n`,
    );
    // Every death was a takeover by a standby (the group never closed).
    expect(takeovers.slice(before)).toEqual(Array(KILLS).fill(true));
    expectHeld(t);
  }, 400_000);
});
