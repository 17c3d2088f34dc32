// bench/fanotify: opens per second on one benchmark-owned ramfs, in one run, with
//   no listener | a minimal C listener (readlink + /proc status + allow) |
//   the Leash watcher for a non-subject UID | for a subject with a 1,000-entry policy |
//   fapolicyd 1.1.7 with an allow-all rule, confined to the benchmark's mount;
// and execs per second of a dynamic program whose loader and libc are on the ramfs (exec +
// interpreter + libraries, as on a host whose root filesystem is marked), for a subject whose
// commands whitelist allows the loader by name (before commands.interpreters) and one where the
// loader is implied by the exec state (interpreter_of).
// Rounds are interleaved and the median is reported; machine load is recorded with
// the figures, because background load changes them (it keeps vCPUs awake).
//
// The Leash rows run the watcher with its defaults (a 20 µs yielding spin in bursts, nice 0);
// `--spin-us U` adds rows with that spin, `--explore` rows without a spin and with other ways
// of reading credentials.
//
// Run as root: `npm run build && node dist/bench/fanotify.js [--opens 50000] [--rounds 3] [--spin-us 50] [--explore]`
// (`--exec-only`: only the exec rows, for profiling the exec state).
// The ramfs is used (not tmpfs) because fapolicyd can only be confined by filesystem type.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createFsSupervisor, type FsSupervisor } from '../src/dataplane/watcher/supervisor.js';
import type { FsCmdPolicy } from '../src/dataplane/watcher/addon.js';
import { benchTmpdir, cleanups, compileC, requireRoot } from './common.js';
import { childOf, cpuNs, loopCpuNs, median, ratioRow, saveJson, stop, type RatioRow } from './fanotify/procstat.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const pkgRoot = [path.resolve(here, '..'), path.resolve(here, '..', '..')].find((r) =>
  fs.existsSync(path.join(r, 'bench', 'fanotify', 'listener.c')),
)!;
const srcDir = path.join(pkgRoot, 'bench', 'fanotify');

const { values } = parseArgs({
  options: {
    opens: { type: 'string', default: '50000' },
    rounds: { type: 'string', default: '3' },
    /** Extra Leash rows with this spin (µs); the main rows use the watcher's default. */
    'spin-us': { type: 'string', default: '' },
    /** Nice of the Leash loop thread. 0: at -14 (fapolicyd's) the wake-ups measured worse here. */
    nice: { type: 'string', default: '0' },
    'no-fapolicyd': { type: 'boolean', default: false },
    /** Execs per exec row. */
    execs: { type: 'string', default: '2000' },
    /** Extra Leash rows: credentials via FAN_REPORT_PIDFD or /proc, and at nice -14 (what each costs). */
    explore: { type: 'boolean', default: false },
    /** Only the exec rows (for profiling the exec state); the opens table is then empty. */
    'exec-only': { type: 'boolean', default: false },
    /** Openers at once in the concurrent rows (where a batch read could take several events). */
    parallel: { type: 'string', default: '4' },
    /**
     * Another build's watcher-main.js (e.g. main's, built in a copy of the tree): rows "(baseline build)" measured in
     * the same rounds, for a change to the loop to be judged against the code before it.
     */
    'baseline-watcher': { type: 'string', default: '' },
  },
});
const OPENS = Number(values.opens);
const PARALLEL = Number(values.parallel);
const EXECS = Number(values.execs);
const ROUNDS = Number(values.rounds);

requireRoot('bench/fanotify', 'fanotify, mount, useradd');

const tmp = benchTmpdir('leash-bench-fan-');
const listenerBin = compileC(srcDir, tmp, 'listener');
const openerBin = compileC(srcDir, tmp, 'opener');
const execerBin = compileC(srcDir, tmp, 'execer');
fs.chmodSync(tmp, 0o755);

const mnt = path.join(tmp, 'ramfs');
fs.mkdirSync(mnt);
execFileSync('mount', ['-t', 'ramfs', '-o', 'mode=0755', 'ramfs', mnt]);
cleanups.push(() => execFileSync('umount', ['-l', mnt]));
fs.chmodSync(mnt, 0o755);
fs.mkdirSync(path.join(mnt, 'data'), { mode: 0o755 });
const target = path.join(mnt, 'data', 'f');
fs.writeFileSync(target, 'x');
fs.chmodSync(target, 0o644);

function user(tag: string): { uid: number; gid: number } {
  const name = `leash-twb${process.pid % 100000}${tag}`;
  spawnSync('userdel', [name]);
  execFileSync('useradd', ['--system', '--no-create-home', '--shell', '/usr/sbin/nologin', '--user-group', name]);
  cleanups.push(() => execFileSync('userdel', [name]));
  return {
    uid: Number(execFileSync('id', ['-u', name], { encoding: 'utf8' })),
    gid: Number(execFileSync('id', ['-g', name], { encoding: 'utf8' })),
  };
}
const N = user('n'); // not a subject
const S = user('s'); // a subject

/** `bin arg count` run as `u`: the number it prints (its operations per second). */
function asUser(u: { uid: number; gid: number }, bin: string, arg: string, count: number): number {
  const out = execFileSync(
    'setpriv',
    [`--reuid=${u.uid}`, `--regid=${u.gid}`, '--clear-groups', bin, arg, String(count)],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return Number(out.trim());
}

const opener = (u: { uid: number; gid: number }, count = OPENS): number => asUser(u, openerBin, target, count);

/** `k` openers at once as `u`, each `count` opens: total opens per second of wall time. */
async function openers(u: { uid: number; gid: number }, k: number, count: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  await Promise.all(
    Array.from(
      { length: k },
      () =>
        new Promise<void>((resolve, reject) => {
          const c = spawn(
            'setpriv',
            [`--reuid=${u.uid}`, `--regid=${u.gid}`, '--clear-groups', openerBin, target, String(count)],
            { stdio: 'ignore', timeout: 120_000 },
          );
          c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`opener exited ${code}`))));
        }),
    ),
  );
  return (k * count) / (Number(process.hrtime.bigint() - t0) / 1e9);
}

// A dynamic program whose loader and libc are copies on the ramfs: its exec raises the
// program's and the loader's exec events and the libraries' opens on the marked filesystem.
let dynDir = '';
let dynProg = '';
let dynLoader = '';
function buildDynamic(): void {
  dynDir = path.join(mnt, 'dyn');
  fs.mkdirSync(dynDir, { mode: 0o755 });
  dynLoader = path.join(dynDir, 'ld-linux-x86-64.so.2');
  fs.copyFileSync(fs.realpathSync('/lib64/ld-linux-x86-64.so.2'), dynLoader);
  fs.chmodSync(dynLoader, 0o755);
  fs.copyFileSync(fs.realpathSync('/lib/x86_64-linux-gnu/libc.so.6'), path.join(dynDir, 'libc.so.6'));
  const src = path.join(tmp, 'true.c');
  fs.writeFileSync(src, 'int main(void){return 0;}\n');
  dynProg = path.join(dynDir, 'true');
  execFileSync('cc', ['-O2', '-o', dynProg, src, `-Wl,--dynamic-linker=${dynLoader}`, `-Wl,-rpath=${dynDir}`]);
}

const execer = (u: { uid: number; gid: number }, count = EXECS): number => asUser(u, execerBin, dynProg, count);

/** bigPolicy, plus the dynamic program: its loader allowed by name, or implied (commands.interpreters). */
function execPolicy(implied: boolean): FsCmdPolicy {
  const p = bigPolicy();
  p.filesystem.allow.push(dynDir);
  p.commands.allow.push(dynProg);
  if (implied) p.commands.interpreters = [dynLoader];
  else p.commands.allow.push(dynLoader);
  return p;
}

function bigPolicy(): FsCmdPolicy {
  const allow: string[] = [];
  for (let i = 0; i < 890; i++) allow.push(path.join(mnt, `p${i}`, 'work'));
  for (let i = 0; i < 100; i++) allow.push(path.join(mnt, `g${i}`, '**', '*.log'));
  allow.push(path.join(mnt, 'data'));
  const deny: string[] = [];
  for (let i = 0; i < 10; i++) deny.push(path.join(mnt, `p${i}`, 'work', 'secret'));
  const cmds = Array.from({ length: 50 }, (_, i) => `tool${i}`);
  return {
    fail_mode: 'closed',
    filesystem: { mode: 'whitelist', allow, deny },
    commands: { mode: 'whitelist', allow: cmds, deny: [] },
  };
}

async function startListener(): Promise<ChildProcess> {
  const c = spawn('timeout', ['-s', 'KILL', '300', listenerBin, mnt], { stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => void c.kill('SIGTERM'));
  await new Promise<void>((resolve, reject) => {
    c.stdout!.on('data', (b: Buffer) => b.toString().includes('ready') && resolve());
    c.on('exit', () => reject(new Error('listener exited')));
  });
  return c;
}

async function leash(tag: string, extraArgs: string[] = [], policy = bigPolicy()): Promise<FsSupervisor> {
  const baseline = tag.includes('baseline build');
  const sup = createFsSupervisor({
    ...(baseline ? { script: values['baseline-watcher'] } : {}),
    subjects: [{ uid: S.uid, policy, failMode: 'closed' }],
    decisions: path.join(tmp, `decisions-${tag.replace(/[^a-z0-9]+/gi, '-') || 'default'}.jsonl`),
    wrap: ['timeout', '-s', 'KILL', '300'],
    args: [`--nice=${values.nice}`, ...extraArgs],
    // The baseline build runs without a standby (one older than the standby watcher has none: its
    // script would be spawned as a second watcher); this build is measured with its standby in place.
    standby: !baseline,
  });
  const st = await sup.ready;
  if (st.marks.length !== 1) throw new Error(`expected one mark, got ${JSON.stringify(st.marks)}`);
  // The standby is a second Node process that starts after the active is ready: its start-up
  // (about half a CPU-second of module loading) would otherwise fall into the first rows measured
  // on a 2-core machine. A host pays it once per service start, not per open.
  if (!baseline) await sup.standbyReady();
  return sup;
}

function fapolicyd(): { rate: number; cpu: number } | null {
  const err = path.join(tmp, 'fapolicyd.err');
  const r = spawnSync(
    'unshare',
    [
      '-m',
      '--propagation',
      'private',
      'bash',
      path.join(srcDir, 'fapolicyd-run.sh'),
      mnt,
      target,
      String(OPENS),
      String(N.uid),
      String(N.gid),
      openerBin,
      err,
    ],
    { encoding: 'utf8', timeout: 180_000 },
  );
  if (r.status !== 0) {
    console.error(`fapolicyd row skipped: ${(r.stderr || '').trim().split('\n').slice(-3).join(' | ')}`);
    return null;
  }
  const hits = /Object hits: (\d+)/.exec(fs.readFileSync(err, 'utf8'));
  if (!hits || Number(hits[1]) < OPENS) throw new Error('fapolicyd did not see the opens');
  const lines = r.stdout.trim().split('\n');
  const cpu = Number(/cpu_ns (\d+)/.exec(r.stdout)?.[1] ?? NaN);
  return { rate: Number(lines.find((l) => /^\d+$/.test(l))), cpu };
}

async function main(): Promise<void> {
  const spin = values['spin-us'] ? Number(values['spin-us']) : null;
  const rows: Record<string, number[]> = {};
  const cpus: Record<string, number[]> = {};
  const loopCpus: Record<string, number[]> = {};
  const add = (k: string, v: number | null, cpu?: number, loopCpu?: number): void => {
    if (v !== null && Number.isFinite(v)) (rows[k] ??= []).push(v);
    if (cpu !== undefined && Number.isFinite(cpu)) (cpus[k] ??= []).push(cpu / OPENS / 1000);
    if (loopCpu !== undefined && Number.isFinite(loopCpu)) (loopCpus[k] ??= []).push(loopCpu / OPENS / 1000);
  };
  // Runs the opener and measures the listener's CPU (and a Leash watcher's loop thread's) over exactly those opens.
  const measure = (k: string, u: { uid: number; gid: number }, pid: number, leashLoop = false): void => {
    const c0 = cpuNs(pid);
    const l0 = leashLoop ? loopCpuNs(pid) : NaN;
    const rate = opener(u);
    add(k, rate, cpuNs(pid) - c0, leashLoop ? loopCpuNs(pid) - l0 : undefined);
  };
  const load0 = os.loadavg();
  const extra: Record<string, unknown> = {};
  const execRows: Record<string, number[]> = {};
  const execCpus: Record<string, number[]> = {};
  buildDynamic();
  async function openRows(round: number): Promise<void> {
    add('no listener', opener(N));

    const l = await startListener();
    opener(N, 2000);
    measure('minimal C listener', N, childOf(l.pid!));
    await stop(l);

    // Today's checks against the watcher without them, in the same round: '(no link check)' is the
    // hard-link check off (statx for the mount ID alone, as before it); '(batch read)' reads up to
    // 64 KiB of events per read(2) instead of one event (native/watcher/watcher.h).
    const variants: [string, string[]][] = [
      ['', []],
      [' (no link check)', ['--link-check=off']],
      [' (batch read)', ['--read=batch']],
      [' (no metrics)', ['--metrics=off']],
      // logging.allows summary (the service's default): allows counted, no line formatted or written.
      [' (allows summary)', ['--allows=summary']],
    ];
    if (spin !== null) variants.push([` (spin ${spin} µs)`, [`--spin-us=${spin}`]]);
    if (values['baseline-watcher']) variants.push([' (baseline build)', []]);
    if (values.explore) variants.push([' (no spin)', ['--spin-us=0']]);
    // Alternate the order round by round, so that a drift in load falls on every variant alike.
    if (round % 2 === 1) variants.reverse();
    for (const [tag, args] of variants) {
      const sup = await leash(tag, args);
      const wpid = sup.watcherPid()!;
      opener(N, 2000);
      measure(`Leash, non-subject${tag}`, N, wpid, true);
      opener(S, 2000);
      measure(`Leash, subject, 1,000 entries${tag}`, S, wpid, true);
      if (PARALLEL > 1) {
        const c0 = cpuNs(wpid);
        const l0 = loopCpuNs(wpid);
        const per = Math.ceil(OPENS / PARALLEL);
        const rate = await openers(S, PARALLEL, per);
        add(`Leash, subject, ${PARALLEL} openers at once${tag}`, rate, cpuNs(wpid) - c0, loopCpuNs(wpid) - l0);
      }
      const st = await sup.status();
      extra[`leash${tag}`] = { droppedAllows: st.droppedAllows, stats: st.stats };
      await sup.close();
    }
  }
  async function laterOpenRows(): Promise<void> {
    if (values.explore) {
      for (const [tag, args] of [
        [' (FAN_REPORT_PIDFD)', ['--identity=report-pidfd']],
        [' (/proc)', ['--identity=proc']],
        [' (nice -14)', ['--nice=-14']],
      ] as const) {
        const sup = await leash(tag, [...args]);
        opener(N, 2000);
        measure(`Leash, non-subject${tag}`, N, sup.watcherPid()!);
        await sup.close();
      }
    }

    if (!values['no-fapolicyd']) {
      const fr = fapolicyd();
      if (fr) add('fapolicyd 1.1.7 (allow all)', fr.rate, fr.cpu);
    }
  }
  const execOnly = values['exec-only'];
  for (let round = 0; round < ROUNDS; round++) {
    if (!execOnly) await openRows(round);

    // Execs of a dynamic program: the loader allowed by name (before) against implied (after).
    for (const [name, implied] of [
      ['Leash, subject execs, loader allowed by name', false],
      ['Leash, subject execs, loader implied (interpreter_of)', true],
    ] as const) {
      const sup = await leash(implied ? 'exec-implied' : 'exec-named', [], execPolicy(implied));
      execer(S, 100);
      const wpid = sup.watcherPid()!;
      const c0 = cpuNs(wpid);
      let rate: number;
      try {
        rate = execer(S);
      } catch (e) {
        const log = path.join(tmp, `decisions-exec-${implied ? 'implied' : 'named'}.jsonl`);
        const blocks = fs.existsSync(log)
          ? fs
              .readFileSync(log, 'utf8')
              .split('\n')
              .filter((l) => l.includes('"block"'))
          : [];
        console.error(`${name}: ${(e as Error).message}; watcher ${JSON.stringify((await sup.status()).stats)}`);
        console.error(blocks.slice(0, 5).join('\n'));
        throw e;
      }
      (execRows[name] ??= []).push(rate);
      (execCpus[name] ??= []).push((cpuNs(wpid) - c0) / EXECS / 1000);
      const st = await sup.status();
      extra[`leash ${name}`] = { stats: st.stats };
      if (implied && !(Number(st.stats?.interpreterOf) >= EXECS)) {
        throw new Error(`the implied row did not imply the loader: ${JSON.stringify(st.stats)}`);
      }
      await sup.close();
    }

    if (!execOnly) await laterOpenRows();
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }
  const load1 = os.loadavg();
  const c = median(rows['minimal C listener'] ?? []);
  const f = median(rows['fapolicyd 1.1.7 (allow all)'] ?? []);
  const table = Object.entries(rows).map(([name, xs]) => ({
    row: name,
    'opens/s (median)': Math.round(median(xs)),
    runs: xs.map((x) => Math.round(x)).join(' '),
    'vs C listener': (median(xs) / c).toFixed(2) + 'x',
    'vs fapolicyd': Number.isFinite(f) ? (median(xs) / f).toFixed(2) + 'x' : 'n/a',
    'listener CPU µs/open': cpus[name] ? median(cpus[name]!).toFixed(2) : '-',
    'loop thread µs/open': loopCpus[name] ? median(loopCpus[name]!).toFixed(2) : '-',
  }));
  console.log(
    `bench/fanotify: ${OPENS} open+close per run, ${ROUNDS} interleaved rounds, ramfs, ` +
      `${os.cpus().length} vCPU, kernel ${os.release()}`,
  );
  console.log(
    `loadavg before ${load0.map((x) => x.toFixed(2)).join(' ')}, after ${load1.map((x) => x.toFixed(2)).join(' ')}`,
  );
  console.table(table);
  // The checks against the watcher without them, round by round (the same round's rows).
  // opens/s: a over b; the loop thread's CPU per open: b over a (so above 1x is a faster a either way).
  const vs = (a: string, b: string): RatioRow | null => ratioRow(rows, loopCpus, a, b);
  const ratios = [
    vs('Leash, non-subject', 'Leash, non-subject (no link check)'),
    vs('Leash, subject, 1,000 entries', 'Leash, subject, 1,000 entries (no link check)'),
    vs(`Leash, subject, ${PARALLEL} openers at once`, `Leash, subject, ${PARALLEL} openers at once (no link check)`),
    vs('Leash, non-subject', 'Leash, non-subject (no metrics)'),
    vs('Leash, subject, 1,000 entries', 'Leash, subject, 1,000 entries (no metrics)'),
    vs(`Leash, subject, ${PARALLEL} openers at once`, `Leash, subject, ${PARALLEL} openers at once (no metrics)`),
    vs('Leash, non-subject', 'Leash, non-subject (baseline build)'),
    vs('Leash, subject, 1,000 entries', 'Leash, subject, 1,000 entries (baseline build)'),
    vs(`Leash, subject, ${PARALLEL} openers at once`, `Leash, subject, ${PARALLEL} openers at once (baseline build)`),
    vs('Leash, non-subject (batch read)', 'Leash, non-subject'),
    vs('Leash, subject, 1,000 entries (batch read)', 'Leash, subject, 1,000 entries'),
    vs(`Leash, subject, ${PARALLEL} openers at once (batch read)`, `Leash, subject, ${PARALLEL} openers at once`),
  ].filter((x) => x !== null);
  if (ratios.length) {
    console.log(
      'the checks (hard links) against none, the metrics (judge-time histogram) against none, this build against --baseline-watcher, and a batch read against one event per read(2), same rounds:',
    );
    console.table(ratios);
  }
  const before = median(execRows['Leash, subject execs, loader allowed by name'] ?? []);
  const execTable = Object.entries(execRows).map(([name, xs]) => ({
    row: name,
    'execs/s (median)': Math.round(median(xs)),
    runs: xs.map((x) => Math.round(x)).join(' '),
    'vs loader by name': (median(xs) / before).toFixed(2) + 'x',
    'watcher CPU µs/exec': execCpus[name] ? median(execCpus[name]!).toFixed(1) : '-',
  }));
  console.log(`execs of a dynamic program (loader + libc on the ramfs), ${EXECS} fork+exec per run`);
  console.table(execTable);
  const out = saveJson({
    ...{ opens: OPENS, execs: EXECS, rounds: ROUNDS, load0, load1, rows, cpus, loopCpus, table, ratios },
    ...{ execRows, execCpus, execTable, extra },
  });
  console.log(`json: ${out}`);
}

main().then(
  () => process.exit(0),
  (e: Error) => {
    console.error(e);
    process.exit(1);
  },
);
