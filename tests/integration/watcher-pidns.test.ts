// The watcher in a PID namespace of its own (as when the service runs in a container), seen from outside it: the
// host's processes have no PID there, so their events carry pid 0. The rule (docs/filesystem.md, "PID
// namespaces"): allowed unjudged, counted, and logged as one count line per surface per interval, never one line
// per event and never in silence. From the agent's side: the same account inside the watcher's namespace, or in
// a PID namespace it makes there, is still judged (EPERM). And status and doctor warn about the namespace.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INITIAL_PID_NS, pidNsOf } from '../../src/dataplane/watcher/pidns.js';
import { fsCmdPolicyOf } from '../../src/dataplane/watcher/policy.js';
import { createFsSupervisor, type FsSupervisor } from '../../src/dataplane/watcher/supervisor.js';
import { createMetrics, pidNamespaceFamily } from '../../src/metrics/metrics.js';
import { startMetricsServer, type MetricsServer } from '../../src/metrics/server.js';
import { nativeAvailable, type WatcherStats } from '../../src/native.js';
import { watcherFamilies } from '../../src/control/reconcile/surfaces/watcher.js';
import {
  copyBinaries,
  createUser,
  isEperm,
  mountTmpfs,
  runAs,
  runRoot,
  runCleanups,
  type Cleanup,
} from './helpers/fslab.js';

const WATCHER = path.resolve('dist/src/dataplane/watcher/watcher-main.js');
const CLI = path.resolve('dist/src/cli/main.js');
const root = process.getuid?.() === 0 && nativeAvailable();
/** The watcher's interval between count lines here: long enough that the burst below ends well inside one. */
const FOREIGN_LOG_MS = 15_000;
const OPENS = 300;
const EXECS = 5;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Opens `file` n times (open + close) in this process; prints `ok=N eperm=N other=N`. */
const OPENER = `const fs = require('node:fs'); let ok = 0, eperm = 0, other = 0;
for (let i = 0; i < Number(process.argv[2]); i++) {
  try { fs.closeSync(fs.openSync(process.argv[1], 'r')); ok++; } catch (e) { if (e.code === 'EPERM') eperm++; else other++; }
}
console.log('ok=' + ok + ' eperm=' + eperm + ' other=' + other);`;

/** The host PID of the watcher process: in the namespace `ns`, PID 2 there (its init is the timeout). */
function watcherHostPid(ns: number): number | null {
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (fs.statSync(`/proc/${e}/ns/pid`).ino !== ns) continue;
      const nspid = /^NSpid:\s+(\d+)\s+(\d+)$/m.exec(fs.readFileSync(`/proc/${e}/status`, 'utf8'));
      if (nspid?.[2] === '2') return Number(nspid[1]);
    } catch {
      /* gone */
    }
  }
  return null;
}

describe.skipIf(!root)('the watcher in a child PID namespace: events from outside it (pid 0)', () => {
  const cleanups: Cleanup[] = [];
  let dir = '';
  let logDir = '';
  let decisions = '';
  let A: { name: string; uid: number; gid: number };
  let sup: FsSupervisor;
  let watcherNs = 0;
  let hostPid = 0;
  const stderr: string[] = [];
  const p = (...s: string[]): string => path.join(dir, ...s);
  const stats = async (): Promise<WatcherStats> => (await sup.status()).stats;
  const lines = (): Record<string, unknown>[] =>
    fs
      .readFileSync(decisions, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const foreignLines = () => lines().filter((l) => l.reason === 'foreign_pid_namespace');

  beforeAll(async () => {
    expect(fs.existsSync(WATCHER), 'run `npm run build` first').toBe(true);
    dir = mountTmpfs(cleanups, '64m', 'h37-pidns-');
    // The decision log on a tmpfs of its own, never marked: the test reads it from outside the watcher's view.
    logDir = mountTmpfs(cleanups, '64m', 'h37-pidns-log-');
    for (const d of ['work', 'secret', 'bin']) fs.mkdirSync(p(d));
    fs.writeFileSync(p('work', 'a.txt'), 'inside');
    fs.writeFileSync(p('secret', 's.txt'), 'secret');
    fs.chmodSync(p('secret', 's.txt'), 0o644); // DAC lets everyone read it: only the watcher stands in the way
    copyBinaries(p('bin'), ['cat', 'true']);
    decisions = path.join(logDir, 'decisions.jsonl');
    A = createUser(cleanups, 'leash-tf');
    sup = createFsSupervisor({
      subjects: [
        {
          uid: A.uid,
          policy: fsCmdPolicyOf({
            fail_mode: 'closed',
            // namespaces: allow, so that the PID namespace the account makes below lives on to be judged
            // (under deny its process in a user namespace of its own is killed: watcher-namespaces.test.ts).
            filesystem: { mode: 'whitelist', allow: [p('work'), p('bin')], deny: [], namespaces: 'allow' },
            commands: { mode: 'whitelist', allow: [p('bin', 'cat')], deny: [] },
          }),
          failMode: 'closed',
        },
      ],
      decisions,
      // The watcher in a new PID namespace (with its own /proc), under a timeout that is that namespace's init:
      // when it ends, everything in the namespace ends with it.
      wrap: ['unshare', '--pid', '--fork', '--mount-proc', 'timeout', '-s', 'KILL', '300'],
      script: WATCHER,
      args: ['--foreign-log-ms', String(FOREIGN_LOG_MS)],
      // A standby finds the active by its PID, which names nothing here.
      standby: false,
      stderr: (s) => stderr.push(s),
    });
    cleanups.push(() => void sup.close());
    const st = await sup.ready;
    // One filesystem mark: this test's tmpfs, nothing else on the host.
    expect(st.marks).toHaveLength(1);
    expect(st.marks[0]!.startsWith(dir)).toBe(true);
    expect(st.pidNs).not.toBeNull();
    watcherNs = st.pidNs!;
    expect(watcherNs).not.toBe(pidNsOf());
    // Its PID (2: its namespace's init is the timeout) names another process here: never kept to signal.
    expect(st.pid).toBe(2);
    expect(sup.watcherPid()).toBeNull();
    hostPid = watcherHostPid(watcherNs) ?? 0;
    expect(hostPid).toBeGreaterThan(2);
    cleanups.push(() => {
      // After the supervisor closed its channel the watcher has exited; if not, it is ended by its own PID.
      try {
        if (watcherHostPid(watcherNs) === hostPid) process.kill(hostPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    });
  }, 60_000);

  afterAll(async () => {
    await sup?.close();
    runCleanups(cleanups);
  });

  it('the account outside the namespace: its opens and execs are allowed unjudged and counted, exactly', async () => {
    const s0 = await stats();
    expect(s0.foreignPidOpen + s0.foreignPidExec).toBe(0);
    // A file and a program the account's policy denies to any process the watcher can see.
    const r = runAs(A, [process.execPath, '-e', OPENER, p('secret', 's.txt'), String(OPENS)], 60_000);
    expect(r.stdout.trim()).toBe(`ok=${OPENS} eperm=0 other=0`);
    const s1 = await stats();
    expect(s1.foreignPidOpen - s0.foreignPidOpen).toBe(OPENS);
    for (let i = 0; i < EXECS; i++) expect(runAs(A, [p('bin', 'true')]).code).toBe(0);
    const s2 = await stats();
    expect(s2.foreignPidExec).toBe(EXECS);
    // None of it was judged, none of it was a subject's decision, none of it unknown.
    expect(s2).toMatchObject({ subjectAllow: 0, subjectDeny: 0, unknownProcess: 0 });
    expect(s2.decisions).toEqual(
      expect.arrayContaining([
        { surface: 'filesystem', action: 'allow', reason: 'foreign_pid_namespace', count: s2.foreignPidOpen },
        { surface: 'commands', action: 'allow', reason: 'foreign_pid_namespace', count: EXECS },
      ]),
    );
    // Not one line per event: nothing written yet within the interval, one journal warning.
    expect(foreignLines()).toEqual([]);
    // The warning comes with the watcher's next drain (every 100 ms), through its stderr.
    const warnedLines = () =>
      stderr
        .join('')
        .split('\n')
        .filter((l) => l.includes("outside the watcher's PID namespace"));
    const t0 = Date.now();
    while (warnedLines().length === 0 && Date.now() - t0 < 5000) await sleep(100);
    await sleep(300); // and no second one
    const warned = warnedLines();
    expect(warned).toHaveLength(1);
    expect(JSON.parse(warned[0]!)).toMatchObject({ component: 'watcher', pidNs: watcherNs });
  }, 90_000);

  it('one line per surface carries the count, at the end of the interval', async () => {
    const st = await stats();
    const t0 = Date.now();
    while (foreignLines().length < 2 && Date.now() - t0 < FOREIGN_LOG_MS + 15_000) await sleep(200);
    const got = foreignLines();
    expect(got).toHaveLength(2);
    const by = Object.fromEntries(got.map((l) => [l.surface, l]));
    expect(by.filesystem).toMatchObject({ action: 'allow', subject: { allowed: st.foreignPidOpen }, rule: null });
    expect(by.commands).toMatchObject({ action: 'allow', subject: { allowed: EXECS }, rule: null });
    expect(by.filesystem).not.toHaveProperty('uid');
    expect(st.foreignPidOpen).toBeGreaterThanOrEqual(OPENS + EXECS); // each exec also opens the program
  }, 60_000);

  it("the account inside the watcher's namespace, or in a PID namespace it makes there, is judged: EPERM", async () => {
    const before = await stats();
    const inside = (argv: string[]) =>
      runRoot([
        'nsenter',
        '-t',
        String(hostPid),
        '-p',
        '--',
        'setpriv',
        `--reuid=${A.uid}`,
        `--regid=${A.gid}`,
        '--clear-groups',
        ...argv,
      ]);
    expect(inside([p('bin', 'cat'), p('work', 'a.txt')])).toMatchObject({ code: 0, stdout: 'inside' });
    expect(isEperm(inside([p('bin', 'cat'), p('secret', 's.txt')]))).toBe(true);
    expect(isEperm(inside([p('bin', 'true')]))).toBe(true);
    // Its own PID namespace (a user namespace lets it make one) is a child of the watcher's: its PIDs are seen.
    const own = inside(['unshare', '-Urpf', '--', p('bin', 'cat'), p('secret', 's.txt')]);
    expect(isEperm(own), own.stderr).toBe(true);
    const after = await stats();
    expect(after.foreignPidOpen).toBe(before.foreignPidOpen);
    expect(after.foreignPidExec).toBe(before.foreignPidExec);
    expect(after.subjectDeny - before.subjectDeny).toBeGreaterThanOrEqual(3);
    const t0 = Date.now();
    const blocks = () => lines().filter((l) => l.action === 'block' && l.uid === A.uid);
    while (blocks().length < 3 && Date.now() - t0 < 5000) await sleep(100);
    expect(blocks().map((l) => l.reason)).toEqual(['not_allowed', 'not_allowed', 'not_allowed']);
  }, 60_000);

  it('leash status and leash doctor warn that the watcher is not in the initial PID namespace', async () => {
    // The service's metrics as the service would serve them: its own namespace and this watcher's status.
    const metrics = createMetrics();
    metrics.collect(() => [pidNamespaceFamily('service', pidNsOf()!)]);
    metrics.collect(async () => watcherFamilies(await sup.status()));
    const socket = path.join(logDir, 'metrics.sock');
    const server: MetricsServer = await startMetricsServer(metrics, { socket, listen: null });
    const tools = net.createServer((c) => c.destroy());
    const toolsSock = path.join(logDir, 'tools.sock');
    await new Promise<void>((r) => tools.listen(toolsSock, () => r()));
    try {
      const cfg = path.join(logDir, 'leash.yaml');
      fs.writeFileSync(cfg, 'user: null\n');
      const env = { ...process.env, LEASH_METRICS_SOCKET: socket, LEASH_STATE_DIR: path.join(logDir, 'state') };
      // Asynchronous: the metrics server answering the CLI runs in this process.
      const cli = (args: string[]) =>
        new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
          const c = spawn(process.execPath, [CLI, '-c', cfg, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
          let stdout = '';
          let stderr = '';
          c.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
          c.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
          const t = setTimeout(() => c.kill('SIGKILL'), 60_000);
          c.on('close', (status) => {
            clearTimeout(t);
            resolve({ status, stdout, stderr });
          });
        });
      const st = await stats();
      const foreign = st.foreignPidOpen + st.foreignPidExec;

      const json = await cli(['status', '--json']);
      expect(json.status, json.stderr).toBe(0);
      const s = JSON.parse(json.stdout) as {
        live: { pidNamespaces: Record<string, number>; foreignPidEvents: number };
        pid_namespace_warnings: string[];
      };
      expect(s.live.pidNamespaces).toEqual({ service: pidNsOf(), watcher: watcherNs });
      expect(s.live.foreignPidEvents).toBe(foreign);
      expect(s.pid_namespace_warnings).toHaveLength(1);
      expect(s.pid_namespace_warnings[0]).toContain(`the watcher runs in PID namespace ${watcherNs}`);
      expect(s.pid_namespace_warnings[0]).toContain(`foreign_pid_namespace, ${foreign} so far`);
      const text = await cli(['status']);
      expect(text.status).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`^WARNING +the watcher runs in PID namespace ${watcherNs}`, 'm'));

      const doc = await cli(['doctor', '--json', '--socket', toolsSock]);
      expect(doc.status, doc.stdout + doc.stderr).toBe(0);
      const d = JSON.parse(doc.stdout) as {
        ok: boolean;
        checks: { check: string; ok: boolean; warnings?: string[] }[];
      };
      const pidCheck = d.checks.find((c) => c.check === 'pid_namespace');
      expect(pidCheck).toMatchObject({ ok: true });
      expect(pidCheck!.warnings).toHaveLength(1);
      expect(pidCheck!.warnings![0]).toContain(`the watcher runs in PID namespace ${watcherNs}`);
      // The service itself here is in the initial namespace: no warning names it.
      expect(pidNsOf()).toBe(INITIAL_PID_NS);
      expect(pidCheck!.warnings!.join(' ')).not.toContain('the service runs');
    } finally {
      await server.close();
      await new Promise<void>((r) => tools.close(() => r()));
    }
  }, 120_000);

  it('at stop, what is counted and not yet logged is written: nothing lost, nothing twice', async () => {
    const written = foreignLines().length;
    const r = runAs(A, [process.execPath, '-e', OPENER, p('secret', 's.txt'), '40'], 60_000);
    expect(r.stdout.trim()).toBe('ok=40 eperm=0 other=0');
    const st = await stats();
    await sup.close();
    const t0 = Date.now();
    while (foreignLines().length === written && Date.now() - t0 < 10_000) await sleep(100);
    const all = foreignLines();
    expect(all).toHaveLength(written + 1);
    expect(all.at(-1)).toMatchObject({ surface: 'filesystem', subject: { allowed: 40 } });
    const total = all
      .filter((l) => l.surface === 'filesystem')
      .reduce((n, l) => n + (l.subject as { allowed: number }).allowed, 0);
    expect(total).toBe(st.foreignPidOpen);
  }, 60_000);
});
