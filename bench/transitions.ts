/**
 * The windows of a change of state (issue 40), on the REAL service with one agent account, before and after, in one
 * run. The service runs in the lab's agent namespace (its nft rules are that namespace's own) and marks only a tmpfs
 * this bench mounts; the agent's operations run as the leashed account (tests/lab/agent-loop.ts: a denied read and a
 * denied page over HTTP, back to back).
 *
 *   reload      a deny written with --no-reconcile, then the reload, then at once one read as the agent:
 *               before = a bare SIGHUP (the old ExecReload=/bin/kill), after = `leash reload` (waits for the
 *               generation). Reads let through, of ROUNDS.
 *   crash       SIGKILL of the whole service (as systemd kills the unit), ExecStopPost, RestartSec=2, a new start:
 *               before = teardown releasing everything (the old ExecStopPost), after = teardown with
 *               SERVICE_RESULT=signal (chains kept). Reads and pages let through from the kill to ready.
 *   bad config  a start on an invalid floor (exit 2), ExecStopPost, 3 s of the agent loop: before = the chains
 *               released (old), after = kept or put in closed.
 *
 * Then, at 1 and 1,000 agents (bench/transitions-scale.ts): process start -> every subject confined, from a cold
 * start, a restart and a crash, checked against the kernel's state at ready.
 *
 *   npm run build && node dist/bench/transitions.js      (root; BENCH_ROUNDS for the reload rounds, default 20;
 *     BENCH_AGENTS=1,1000 the agent counts of the second table; BENCH_ONLY=scale for the second table alone)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { loadavg } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildLab, createCleanups, LAB, stopChild, type LabUser } from '../tests/lab/netns.js';
import { AGENT_LOOP, type LoopCounts } from '../tests/lab/agent-loop.js';
import { run } from './args.js';
import { teardownOnSignals } from './common.js';
import { benchTmpfs, scaleRows, scaleTable, serviceSpawner, type ScaleRow } from './transitions-scale.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 20);
const AGENT_COUNTS = (process.env.BENCH_AGENTS ?? '1,1000').split(',').map(Number);
/** The scale table's synthetic accounts (checked free in /etc/passwd). */
const UID_BASE = 64000;
const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src/cli/main.js');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/transitions needs root (namespaces, nft, fanotify)');
  const cleanups = createCleanups();
  teardownOnSignals(() => cleanups.run());
  // One namespace pair per run: buildLab first removes a namespace of the same name, so two runs at once (two
  // checkouts on one host) would pull each other's namespace, chains and agent loops from under them.
  const lab = await buildLab({ id: `l40bb${process.pid}`, dnsLog: false, cleanups });
  const rows: string[][] = [];
  const scale: ScaleRow[] = [];
  try {
    if (process.env.BENCH_ONLY !== 'scale') await windows(lab, rows);
    for (const n of AGENT_COUNTS) scale.push(...(await scaleRows(lab, CLI, n, UID_BASE)));
  } finally {
    await lab.teardown();
  }
  const load = loadavg()[0]!.toFixed(2);
  if (rows.length) {
    const w = [16, 28, 8, 8];
    const line = (r: string[]) => r.map((c, i) => c.padEnd(w[i]!)).join('  ');
    process.stdout.write(`bench/transitions: 1 agent, load ${load}\n`);
    process.stdout.write(`${line(['transition', 'measure', 'before', 'after'])}\n`);
    for (const r of rows) process.stdout.write(`${line(r)}\n`);
  }
  if (scale.length) {
    process.stdout.write(`\nprocess start -> every subject confined (ready, checked), load ${load}\n`);
    process.stdout.write(`${scaleTable(scale)}\n`);
  }
}

/** The windows of each transition at one agent (the first table). */
async function windows(lab: Awaited<ReturnType<typeof buildLab>>, rows: string[][]): Promise<void> {
  {
    const { dir, mnt } = benchTmpfs(lab, 'l40b-', 'leash-l40b-bench', '8m');
    for (let i = 0; i < 2 * ROUNDS; i++) fs.writeFileSync(path.join(mnt, `f${i}`), 'x\n', { mode: 0o644 });
    const agent: LabUser = await lab.createUser('leash-t4bb');
    fs.writeFileSync(
      path.join(dir, 'passwd'),
      `root:x:0:0:root:/root:/bin/bash\n${agent.name}:x:${agent.uid}:${agent.gid}::/nonexistent:/usr/sbin/nologin\n`,
    );
    const cfg = path.join(dir, 'leash.yaml');
    const good = `user: null
fail_mode: closed
network: { mode: whitelist, allow: [good.lab], deny: [], dns_resolvers: [${LAB.dnsV4}] }
filesystem: { mode: blacklist, allow: [], deny: [${mnt}/held] }
commands: { mode: blacklist, allow: [], deny: [] }
tools: { mode: whitelist, allow: [], deny: [] }
logging: { level: info, decisions: ${path.join(dir, 'decisions.jsonl')} }
`;
    fs.writeFileSync(cfg, good);
    const env: NodeJS.ProcessEnv = {
      LEASH_STATE_DIR: path.join(dir, 'state'),
      LEASH_PASSWD: path.join(dir, 'passwd'),
      LEASH_TOOLS_SOCKET: path.join(dir, 'tools.sock'),
      LEASH_APPROVALS_SOCKET: path.join(dir, 'approvals.sock'),
      LEASH_PID_FILE: path.join(dir, 'leash.pid'),
      LEASH_WATCHER_TIMEOUT_S: '1200',
    };
    const leash = (args: string[], extra: NodeJS.ProcessEnv = {}) =>
      run(['ip', 'netns', 'exec', lab.agentNs, process.execPath, CLI, '-c', cfg, ...args], { ...env, ...extra });
    // The agent's argv prefix: in the lab's agent namespace, as the leashed account.
    const asAgent = [
      'ip',
      'netns',
      'exec',
      lab.agentNs,
      'setpriv',
      `--reuid=${agent.uid}`,
      `--regid=${agent.gid}`,
      '--clear-groups',
    ];
    const readAs = (file: string) => run([...asAgent, '/bin/cat', file]).code === 0;
    let svc: ChildProcess | null = null;
    const svcOut = serviceSpawner(lab, CLI, cfg, env);
    const spawnSvc = svcOut.spawn;
    /** Starts the service; ms from spawn to ready (every subject applied on every surface). */
    const start = async () => {
      fs.rmSync(env.LEASH_PID_FILE!, { force: true });
      const t = performance.now();
      svc = spawnSvc();
      while (!svcOut.err().includes('"msg":"ready"')) {
        if (svc.exitCode !== null) throw new Error(`service exited: ${svcOut.err()}`);
        await sleep(5);
      }
      return performance.now() - t;
    };
    const script = path.join(dir, 'loop.mjs');
    fs.writeFileSync(script, AGENT_LOOP, { mode: 0o644 });
    const other = LAB.hosts.find((h) => h.name === 'other.lab')!.v4;
    const loop = (ms: number): Promise<LoopCounts> => {
      const c = spawn(
        asAgent[0]!,
        [...asAgent.slice(1), process.execPath, script, path.join(mnt, 'held'), other, '80', 'nope.lab', String(ms)],
        { stdio: ['ignore', 'pipe', 'ignore'] },
      );
      lab.defer(`stop loop ${c.pid}`, () => stopChild(c, 2000));
      let out = '';
      c.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
      return new Promise((res) => c.on('exit', () => res(JSON.parse(out.trim()) as LoopCounts)));
    };
    const stopPost = (result: string | null, code: string, status: string) =>
      leash(['teardown'], result === null ? {} : { SERVICE_RESULT: result, EXIT_CODE: code, EXIT_STATUS: status });

    await start();

    // reload
    let next = 0;
    const reloadThrough = (how: 'hup' | 'leash') => {
      let through = 0;
      for (let i = 0; i < ROUNDS; i++) {
        const f = path.join(mnt, `f${next++}`);
        leash(['fs', 'deny', f, '--no-reconcile']);
        if (how === 'hup') process.kill(Number(fs.readFileSync(env.LEASH_PID_FILE!, 'utf8')), 'SIGHUP');
        else if (leash(['reload']).code !== 0) throw new Error('leash reload failed');
        if (readAs(f)) through++;
      }
      return through;
    };
    rows.push(['reload', `reads through of ${ROUNDS}`, String(reloadThrough('hup')), String(reloadThrough('leash'))]);

    // crash
    const crash = async (keep: boolean) => {
      const l = loop(9000);
      await sleep(1000);
      const t = performance.now();
      // The whole process group, as systemd kills the unit (the watcher, in a timeout's group of its own, ends when
      // its parent's pipe closes).
      process.kill(-svc!.pid!, 'SIGKILL');
      while (svc!.exitCode === null && svc!.signalCode === null) await sleep(5);
      stopPost(keep ? 'signal' : null, 'killed', 'KILL');
      await sleep(2000);
      await start();
      const gap = performance.now() - t;
      return { gap, c: await l };
    };
    const cb = await crash(false);
    const ca = await crash(true);
    rows.push(['crash', 'ms kill -> ready', cb.gap.toFixed(0), ca.gap.toFixed(0)]);
    rows.push(['crash', 'reads through (denied file)', String(cb.c.readsThrough), String(ca.c.readsThrough)]);
    rows.push(['crash', 'pages through (denied host)', String(cb.c.connsThrough), String(ca.c.connsThrough)]);

    // bad config
    const bad = async (keep: boolean) => {
      await stopChild(svc!, 10_000);
      stopPost('success', 'exited', '0');
      fs.writeFileSync(cfg, `${good}fail_mode: sideways\n`);
      const b = spawnSvc();
      await new Promise((r) => b.on('exit', r));
      stopPost(keep ? 'exit-code' : null, 'exited', '2');
      if (!keep) leash(['teardown', '--force']);
      const c = await loop(3000);
      fs.writeFileSync(cfg, good);
      await start();
      return c;
    };
    const bb = await bad(false);
    const ba = await bad(true);
    rows.push(['bad config, 3 s', 'reads through', String(bb.readsThrough), String(ba.readsThrough)]);
    rows.push(['bad config, 3 s', 'pages through', String(bb.connsThrough), String(ba.connsThrough)]);
    await stopChild(svc!, 10_000);
    stopPost('success', 'exited', '0');
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
