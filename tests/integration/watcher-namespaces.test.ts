// Filesystems in namespaces the agent makes (issue #14), from the attacker's side: the leashed account runs
// `unshare -Urm` (a user and mount namespace of its own), mounts a tmpfs there, copies a program the
// commands whitelist does not allow onto it and runs it, again and again, timing each run from its mount.
// Under `filesystem.namespaces: allow` the watcher finds the namespace, marks that tmpfs (FAN_MARK_FILESYSTEM
// through /proc/PID/root, only a filesystem none of its own mounts has) and the exec turns into EPERM
// (`namespace_denied`); under the default `deny` the process is killed (`namespace_denied`). The window
// between the mount and the first judged exec (or the kill) is printed. The only marks are on the test's own
// tmpfs and on the tmpfs the account mounted; the account's namespaces die with its processes.
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fsCmdPolicyOf } from '../../src/dataplane/watcher/policy.js';
import { parseMountinfo } from '../../src/dataplane/watcher/policy.js';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import { nativeAvailable } from '../../src/native.js';
import { copyBinaries, createUser, mountTmpfs, runCleanups, type Cleanup } from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const root = process.getuid?.() === 0 && nativeAvailable();
const ROUNDS = Number(process.env.LEASH_TEST_ROUNDS ?? 5);

/**
 * race MOUNTPOINT PROGRAM [FIRST]: (run inside the account's own user + mount namespace) mounts a tmpfs on
 * MOUNTPOINT, copies PROGRAM onto it as MOUNTPOINT/allowed and runs the copy until an exec fails, for at most 10 s. One line per
 * run, "ran <µs since the mount>", then "refused <errno name> <µs>" (or nothing more when killed). With FIRST, a
 * tmpfs is mounted there 1.5 s before (the namespace is then known: the timed mount is found by its notification).
 */
const RACE_C = `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000LL + t.tv_nsec / 1000; }
int main(int c, char **v) {
  if (c < 3) return 2;
  setvbuf(stdout, NULL, _IONBF, 0);
  if (c > 3) {
    /* a first mount, then 1.5 s: the namespace is known to the watcher before the mount that is timed */
    if (mount("none", v[3], "tmpfs", 0, "mode=0755") != 0) { printf("mount %s\\n", strerrorname_np(errno)); return 4; }
    usleep(1500000);
  }
  char buf[1 << 16], dst[4096];
  int in = open(v[2], O_RDONLY | O_CLOEXEC);
  if (in < 0) { printf("source %s\\n", strerrorname_np(errno)); return 3; }
  ssize_t n = read(in, buf, sizeof buf), total = 0;
  static char prog[4 << 20];
  while (n > 0 && total + n <= (ssize_t)sizeof prog) { memcpy(prog + total, buf, n); total += n; n = read(in, buf, sizeof buf); }
  close(in);
  if (mount("none", v[1], "tmpfs", 0, "mode=0755") != 0) { printf("mount %s\\n", strerrorname_np(errno)); return 4; }
  long long t0 = us();
  printf("mounted\\n");
  snprintf(dst, sizeof dst, "%s/allowed", v[1]);
  int out = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
  if (out < 0 || write(out, prog, total) != total) { printf("refused %s %lld copy\\n", strerrorname_np(errno), us() - t0); return 0; }
  close(out);
  while (us() - t0 < 10000000LL) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return 5;
    pid_t k = fork();
    if (k == 0) { char *a[] = {dst, NULL}; execv(dst, a); int e = errno; (void)!write(p[1], &e, sizeof e); _exit(127); }
    close(p[1]);
    int e = 0;
    ssize_t got = read(p[0], &e, sizeof e);
    close(p[0]);
    int st;
    waitpid(k, &st, 0);
    long long t = us() - t0;
    if (got == (ssize_t)sizeof e) { printf("refused %s %lld\\n", strerrorname_np(e), t); return 0; }
    printf("ran %lld\\n", t);
  }
  printf("timeout\\n");
  return 6;
}
`;

interface RaceResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  lines: string[];
}

describe.skipIf(!root)('filesystems in namespaces the agent makes (unshare -Urm, a tmpfs of its own)', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let decisions = '';
  let sup: FsSupervisor;
  let A: { name: string; uid: number; gid: number }; // namespaces: allow (marked, judged)
  let D: { name: string; uid: number; gid: number }; // the default: deny (killed)
  const stderr: string[] = [];
  const p = (...s: string[]): string => path.join(dir, ...s);

  const race = (u: { uid: number; gid: number }, mnt: string, first?: string): Promise<RaceResult> =>
    new Promise((resolve, reject) => {
      const child = spawn(
        'timeout',
        [
          '-s',
          'KILL',
          '20',
          'setpriv',
          `--reuid=${u.uid}`,
          `--regid=${u.gid}`,
          '--clear-groups',
          'unshare',
          '-Urm',
          '--',
          p('bin', 'race'),
          mnt,
          p('bin', 'denied'),
          ...(first ? [first] : []),
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (b: Buffer) => (out += b.toString()));
      child.stderr.on('data', (b: Buffer) => (out += b.toString()));
      child.on('error', reject);
      child.on('close', (code, signal) => resolve({ code, signal, lines: out.trim().split('\n') }));
    });
  const readDecisions = (): Record<string, unknown>[] =>
    fs.existsSync(decisions)
      ? fs
          .readFileSync(decisions, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Record<string, unknown>)
      : [];

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER), 'run `npm run build` first').toBe(true);
    for (const b of ['cc', 'unshare', 'setpriv', 'timeout'])
      expect(spawnOk(b), `${b} is needed for this test (apt-get install util-linux gcc coreutils)`).toBe(true);
    dir = mountTmpfs(cleanups);
    copyBinaries(p('bin'), ['true']);
    fs.renameSync(p('bin', 'true'), p('bin', 'denied'));
    fs.writeFileSync(p('bin', 'race.c'), RACE_C);
    execFileSync('cc', ['-O2', '-o', p('bin', 'race'), p('bin', 'race.c')]);
    for (const d of ['mnt-a', 'mnt-b', 'mnt-d', 'log']) fs.mkdirSync(p(d), { mode: 0o755 });
    fs.chmodSync(p('log'), 0o700);
    decisions = p('log', 'decisions.jsonl');
    A = createUser(cleanups);
    D = createUser(cleanups);
    const policy = (namespaces?: 'allow') =>
      fsCmdPolicyOf({
        fail_mode: 'closed',
        filesystem: {
          mode: 'whitelist',
          allow: [p('bin'), p('mnt-a'), p('mnt-d')],
          deny: [],
          ...(namespaces ? { namespaces } : {}),
        },
        // The race program may run; the copy of `true` named `denied` may not, under any name.
        commands: { mode: 'whitelist', allow: [p('bin', 'race'), p('mnt-a', 'allowed')], deny: [] },
      });
    sup = createFsSupervisor({
      subjects: [
        { uid: A.uid, policy: policy('allow'), failMode: 'closed' },
        { uid: D.uid, policy: policy(), failMode: 'closed' },
      ],
      decisions,
      wrap: ['timeout', '-s', 'KILL', '300'],
      script: WATCHER,
      stderr: (s) => stderr.push(s),
    });
    cleanups.push(() => void sup.close());
    const st = await sup.ready;
    // One mark at the start: the test's own tmpfs (under whichever of its paths), nothing else of the host's.
    expect(st.marks).toHaveLength(1);
    expect(st.marks[0]!.startsWith(dir)).toBe(true);
  }, 60_000);

  afterAll(async () => {
    const notes = stderr
      .join('')
      .split('\n')
      .filter((l) => l.includes('namespace'));
    if (notes.length) process.stdout.write(`watcher: ${notes.slice(0, 6).join('\n')}\n`);
    await sup?.close();
    runCleanups(cleanups);
  });

  /** Runs the race ROUNDS times; each must end in EPERM. Prints every round's window and the median. */
  const rounds = async (label: string, mnt: string, first?: string): Promise<void> => {
    const windows: number[] = [];
    const ranCounts: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const r = await race(A, mnt, first);
      const last = r.lines[r.lines.length - 1] ?? '';
      const m = /^refused (\w+) (\d+)/.exec(last);
      expect(r.lines[0], r.lines.join('\n')).toBe('mounted');
      expect(m, r.lines.slice(-3).join('\n')).not.toBeNull();
      expect(m![1]).toBe('EPERM');
      windows.push(Number(m![2]) / 1000);
      ranCounts.push(r.lines.filter((l) => l.startsWith('ran ')).length);
    }
    const sorted = [...windows].sort((a, b) => a - b);
    process.stdout.write(
      `window (${label}): mount -> first judged exec, median ${sorted[Math.floor(ROUNDS / 2)]!.toFixed(1)} ms, ` +
        `max ${sorted[ROUNDS - 1]!.toFixed(1)} ms; rounds: ${windows.map((w) => w.toFixed(1)).join(', ')} ms; ` +
        `execs of the copy that ran first: ${ranCounts.join(', ')}; load: ${fs.readFileSync('/proc/loadavg', 'utf8').trim()}\n`,
    );
  };

  it('namespaces: allow — the tmpfs the account mounts is marked and its exec turns into EPERM (namespace_denied)', async () => {
    // The program's name in the account's namespace is one the whitelist allows there: no name it chooses helps.
    await rounds('a new namespace, found by the 200 ms scan', p('mnt-a'));
    await sup.status(); // a round trip: the watcher has drained its queue
    await new Promise((res) => setTimeout(res, 300));
    const line = readDecisions().find(
      (d) => d.uid === A.uid && d.reason === 'namespace_denied' && d.action === 'block',
    );
    expect(line, 'a namespace_denied decision line for the account').toBeDefined();
    expect(['commands', 'filesystem']).toContain(line!.surface);
    const st = await sup.status();
    expect(st.namespaces?.marked).toBeGreaterThanOrEqual(1);
    // No mark on any filesystem of the test's (the host's) own mount namespace but the test's tmpfs.
    const ours = new Set(parseMountinfo(fs.readFileSync('/proc/self/mountinfo', 'utf8')).map((x) => x.dev));
    for (const dev of st.namespaces?.markedDevs ?? []) expect(ours.has(dev), `marked ${dev}`).toBe(false);
  }, 60_000);

  it('a mount in a namespace already known is marked on its notification (FAN_MARK_MNTNS)', async (ctx) => {
    const st = await sup.status();
    if (!st.namespaces?.mountEvents) {
      // Before Linux 6.14 there are no mount events: the scan re-reads known namespaces instead.
      expect(
        Number(os.release().split('.')[0]) * 100 + Number(os.release().split('.')[1]) < 614,
        'mount events on 6.14+',
      ).toBe(true);
      ctx.skip();
    }
    const before = st.namespaces!.notified;
    await rounds('a namespace already known, its new mount found by the notification', p('mnt-a'), p('mnt-b'));
    // Each round's timed mount was notified (the scan does not re-read a namespace it knows while notifications run).
    expect((await sup.status()).namespaces!.notified - before).toBeGreaterThanOrEqual(ROUNDS);
  }, 60_000);

  it('namespaces: deny (the default under a whitelist) — the process in its own user namespace is killed', async () => {
    const r = await race(D, p('mnt-d'));
    const ran = r.lines.filter((l) => l.startsWith('ran '));
    const lastRan = ran.length ? Number(ran[ran.length - 1]!.split(' ')[1]) / 1000 : 0;
    process.stdout.write(
      `window (namespaces: deny): killed after its mount, ${ran.length} exec(s) of the copy ran, the last ${lastRan.toFixed(1)} ms after the mount; ` +
        `last line: ${r.lines[r.lines.length - 1]}\n`,
    );
    // Killed by SIGKILL (timeout, its parent, dies of the same signal to pass it on).
    expect(r.signal ?? r.code, r.lines.join('\n')).toBe('SIGKILL');
    expect(r.lines.some((l) => l.startsWith('refused') || l === 'timeout')).toBe(false);
    await new Promise((res) => setTimeout(res, 300));
    const line = readDecisions().find((d) => d.uid === D.uid && d.reason === 'namespace_denied');
    expect(line, 'a namespace_denied decision line for the killed process').toMatchObject({
      surface: 'commands',
      action: 'block',
      rule: 'filesystem.namespaces',
    });
    expect((line!.subject as { pid: number }).pid).toBeGreaterThan(0);
    expect((await sup.status()).namespaces?.killed).toBeGreaterThanOrEqual(1);
  }, 30_000);
});

function spawnOk(bin: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${bin}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
