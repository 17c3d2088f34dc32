/**
 * bench/proxy: the network surface's cost, in ONE run in the lab (two namespaces on a veth pair), for three paths:
 *   direct   root in the agent namespace (no leash rules) straight to the upstream
 *   leash    the leashed account: nft redirect -> Leash proxy (peek SNI, decide, resolve, splice)
 *   nginx    another account: nft redirect -> nginx stream with ssl_preread doing the same SNI routing (1 worker)
 *   relay    a third account: nft redirect -> bench/proxy-relay.c, the floor of any TCP-terminating proxy:
 *            connect to SO_ORIGINAL_DST at once, no peek, no decision, no log, on one epoll thread; for bulk it
 *            splices each direction, for the connection phases it copies (its `copy` mode, fewer calls per message)
 * Measures bulk throughput (1 GiB, median and best of 3), new TLS connections/s with 50 concurrent clients (median of 3
 * runs of 2 s), and p50/p99 connection set-up time (connect -> TLS handshake done) at one client (600 samples),
 * every repetition interleaved across the paths. Bulk also measures the whole machine's busy CPU per GiB for each
 * path (/proc/stat around the transfer): on a machine whose direct path already keeps every CPU busy, a path's
 * throughput against direct is about direct's CPU per GiB over its own, and the relay's row says where that puts
 * the best a terminating proxy can do here. Prints a table with ratios, writes JSON
 * with --json <file>. Root only; run by hand: `npm run build && node dist/bench/proxy.js`.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { numberArg } from './args.js';
import { netPolicy } from '../tests/lab/policy.js';
import { buildLab, createCleanups, LAB, stopChild, type Lab, type LabUser } from '../tests/lab/netns.js';
import { captureHello } from '../tests/lab/client-hello.js';
import { compileC, teardownOnSignals } from './common.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const BULK_PORT = 9443;
const BULK_BYTES = 1 << 30;
// Outside the listeners' range (18000-20999): Leash's input guard resets a redirected connection to an unmarked
// socket there, as nginx's and the relay's are.
const RELAY_PORT = 21445;
const RELAY_COPY_PORT = 21446;
const pkgRoot = [path.resolve(here, '..'), path.resolve(here, '..', '..')].find((r) =>
  fs.existsSync(path.join(r, 'bench', 'proxy-relay.c')),
)!;
const TARGET = LAB.hosts[0]!; // good.lab
const args = process.argv.slice(2);
const REPS = numberArg('--reps', 3);
const CONNS_MS = numberArg('--conns-ms', 2000);
const CONC = numberArg('--concurrency', 50);
const SETUP_N = numberArg('--setup-n', 600);
// Each path first carries this long of the connection load, not counted: Leash is a long-running daemon whose
// JavaScript is compiled by V8 as it runs (a cold one is measured in its interpreter tiers); nginx and direct get
// the same warm-up. --warmup-ms 0 measures from cold.
const WARMUP_MS = numberArg('--warmup-ms', 3000);
// --skip-bulk: only the connection phases (e.g. to profile the per-connection cost); the bulk rows print 0.
const SKIP_BULK = args.includes('--skip-bulk');
// --skip-conns: only the bulk phase (e.g. to profile the data path); the connection rows print 0.
const SKIP_CONNS = args.includes('--skip-conns');

type PathName = 'direct' | 'leash' | 'nginx' | 'relay';
type BulkPath = PathName;

function nginxConf(dir: string): string {
  return `load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 8192; }
stream {
  map $ssl_preread_server_name $tls_up { ${TARGET.name} ${TARGET.v4}:443; default 127.0.0.1:1; }
  map $ssl_preread_server_name $bulk_up { ${TARGET.name} ${TARGET.v4}:${BULK_PORT}; default 127.0.0.1:1; }
  server { listen 127.0.0.1:21443 backlog=4096; ssl_preread on; proxy_pass $tls_up; }
  server { listen 127.0.0.1:21444 backlog=4096; ssl_preread on; proxy_pass $bulk_up; }
}
`;
}

async function client(lab: Lab, user: LabUser | null, argv: string[]): Promise<unknown> {
  const script = path.join(here, 'proxy-client.js');
  const pre = user ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'] : [];
  const r = await lab.agent([...pre, process.execPath, script, ...argv]);
  if (r.code !== 0) throw new Error(`client ${argv[0]} failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

// Both 0 for a phase that was skipped (no samples).
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? 0;

/** A process's [user, system] CPU seconds. */
function cpuParts(pid: number): [number, number] {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return [Number(fields[11]) / 100, Number(fields[12]) / 100]; // clock ticks (USER_HZ 100) -> seconds
}

function cpuSeconds(pid: number): number {
  const [u, s] = cpuParts(pid);
  return u + s;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/proxy needs root (namespaces, accounts)');
  const cleanups = createCleanups();
  teardownOnSignals(() => cleanups.run());
  try {
    const load0 = fs.readFileSync('/proc/loadavg', 'utf8').trim();
    const lab = await buildLab({ id: 'netb', bulk: { port: BULK_PORT, bytes: BULK_BYTES }, cleanups });
    const leashUser = await lab.createUser('leash-tb1');
    const nginxUser = await lab.createUser('leash-tb2');
    const relayUser = await lab.createUser('leash-tb3');
    const enforcer = await lab.startEnforcer({
      subjects: [{ uid: leashUser.uid, port: 18443, policy: netPolicy({ allow: [TARGET.name!] }) }],
    });
    // nginx gets the same kind of kernel redirect, for its own account, from a table of the bench's own.
    const nft = await lab.agent(
      ['nft', '-f', '-'],
      `table ip leash_bench {
  chain o { type nat hook output priority -100; policy accept;
    meta skuid ${nginxUser.uid} tcp dport 443 redirect to :21443
    meta skuid ${nginxUser.uid} tcp dport ${BULK_PORT} redirect to :21444
    meta skuid ${relayUser.uid} tcp dport ${BULK_PORT} redirect to :${RELAY_PORT}
    meta skuid ${relayUser.uid} tcp dport 443 redirect to :${RELAY_COPY_PORT}
  }
}\n`,
    );
    if (nft.code !== 0) throw new Error(nft.stderr);
    fs.writeFileSync(path.join(lab.dir, 'nginx.conf'), nginxConf(lab.dir));
    const ngx = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.agentNs,
        'nginx',
        '-p',
        lab.dir,
        '-e',
        path.join(lab.dir, 'nginx-error.log'),
        '-c',
        path.join(lab.dir, 'nginx.conf'),
      ],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let ngxErr = '';
    ngx.stderr!.on('data', (d: Buffer) => (ngxErr += d.toString()));
    cleanups.defer(`stop nginx pid ${ngx.pid}`, () => stopChild(ngx));
    for (let i = 0; i < 50 && !fs.existsSync(path.join(lab.dir, 'nginx.pid')); i++)
      await new Promise((r) => setTimeout(r, 100));
    if (!fs.existsSync(path.join(lab.dir, 'nginx.pid'))) throw new Error(`nginx did not start: ${ngxErr}`);

    const relayBin = compileC(path.join(pkgRoot, 'bench'), lab.dir, 'proxy-relay');
    const startRelay = async (argv: string[]) => {
      const child = spawn('ip', ['netns', 'exec', lab.agentNs, relayBin, ...argv], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      cleanups.defer(`stop proxy-relay pid ${child.pid}`, () => stopChild(child));
      await new Promise<void>((resolve, reject) => {
        child.stdout!.once('data', () => resolve());
        child.once('exit', (code) => reject(new Error(`proxy-relay exited (${code})`)));
      });
      return child;
    };
    const relayBulk = await startRelay([String(RELAY_PORT)]);
    // `ip netns exec` execs the relay: the child's PID is the relay's, whose CPU the connection phase reads.
    const relayCopy = await startRelay([String(RELAY_COPY_PORT), 'copy']);

    const helloFile = path.join(lab.dir, 'hello.hex');
    fs.writeFileSync(helloFile, (await captureHello(TARGET.name!)).toString('hex'));
    fs.chmodSync(helloFile, 0o644);
    const users: Record<BulkPath, LabUser | null> = {
      direct: null,
      leash: leashUser,
      nginx: nginxUser,
      relay: relayUser,
    };
    const paths: PathName[] = ['direct', 'leash', 'nginx', 'relay'];
    const bulkPaths: BulkPath[] = paths;

    // Sanity: every path reaches the upstream and Leash decided on the name.
    for (const p of paths) await client(lab, users[p], ['setup', TARGET.v4, '443', TARGET.name!, '3']);
    if (!enforcer.decisions().some((d) => d.action === 'allow')) throw new Error('Leash made no allow decision');

    const bulk: Record<BulkPath, number[]> = { direct: [], leash: [], nginx: [], relay: [] };
    // The whole machine's busy CPU seconds per GiB moved, per path and repetition.
    const busy: Record<BulkPath, number[]> = { direct: [], leash: [], nginx: [], relay: [] };
    const clientCpu: Record<BulkPath, number[]> = { direct: [], leash: [], nginx: [], relay: [] };
    let leashCpu = 0;
    let nginxCpu = 0;
    let relayCpu = 0;
    const ngxWorkers = () =>
      fs
        .readFileSync(`/proc/${ngx.pid}/task/${ngx.pid}/children`, 'utf8')
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map(Number);
    const ngxCpu = () => ngxWorkers().reduce((a, p) => a + cpuSeconds(p), cpuSeconds(ngx.pid!));
    // The kernel's share (system time) of each proxy's CPU in the connection phase.
    const ngxSys = () => ngxWorkers().reduce((a, p) => a + cpuParts(p)[1], cpuParts(ngx.pid!)[1]);
    for (let rep = 0; rep < (SKIP_BULK ? 0 : REPS); rep++) {
      for (const p of bulkPaths) {
        const c0 =
          p === 'leash'
            ? cpuSeconds(enforcer.pid)
            : p === 'nginx'
              ? ngxCpu()
              : p === 'relay'
                ? cpuSeconds(relayBulk.pid!)
                : 0;
        const r = (await client(lab, users[p], ['bulk', TARGET.v4, String(BULK_PORT), helloFile])) as {
          bytes: number;
          ms: number;
          busyS: number;
          clientS: number;
        };
        if (r.bytes !== BULK_BYTES) throw new Error(`${p}: bulk got ${r.bytes} bytes`);
        if (p === 'leash') leashCpu += cpuSeconds(enforcer.pid) - c0;
        if (p === 'nginx') nginxCpu += ngxCpu() - c0;
        if (p === 'relay') relayCpu += cpuSeconds(relayBulk.pid!) - c0;
        bulk[p].push((r.bytes * 8) / (r.ms / 1000) / 1e9);
        busy[p].push(r.busyS / (r.bytes / 2 ** 30));
        clientCpu[p].push(r.clientS / (r.bytes / 2 ** 30));
      }
    }
    if (WARMUP_MS > 0 && !SKIP_CONNS)
      for (const p of paths)
        await client(lab, users[p], ['conns', TARGET.v4, '443', TARGET.name!, String(CONC), String(WARMUP_MS)]);
    // Interleaved repetitions (direct, leash, nginx, direct, ...): background load on a shared VM drifts, and
    // interleaving spreads the drift over the three paths instead of charging it to one.
    const rates: Record<PathName, number[]> = { direct: [], leash: [], nginx: [], relay: [] };
    const errs: Record<PathName, number> = { direct: 0, leash: 0, nginx: 0, relay: 0 };
    const cpuUs: Record<PathName, { s: number; sys: number; n: number }> = {
      direct: { s: 0, sys: 0, n: 0 },
      leash: { s: 0, sys: 0, n: 0 },
      nginx: { s: 0, sys: 0, n: 0 },
      relay: { s: 0, sys: 0, n: 0 },
    };
    const samples: Record<PathName, number[]> = { direct: [], leash: [], nginx: [], relay: [] };
    for (let rep = 0; rep < (SKIP_CONNS ? 0 : REPS); rep++) {
      for (const p of paths) {
        const cpu =
          p === 'leash'
            ? () => cpuSeconds(enforcer.pid)
            : p === 'nginx'
              ? ngxCpu
              : p === 'relay'
                ? () => cpuSeconds(relayCopy.pid!)
                : null;
        const sys =
          p === 'leash'
            ? () => cpuParts(enforcer.pid)[1]
            : p === 'nginx'
              ? ngxSys
              : p === 'relay'
                ? () => cpuParts(relayCopy.pid!)[1]
                : null;
        const c0 = cpu?.() ?? 0;
        const s0 = sys?.() ?? 0;
        const r = (await client(lab, users[p], [
          'conns',
          TARGET.v4,
          '443',
          TARGET.name!,
          String(CONC),
          String(CONNS_MS),
        ])) as { count: number; errors: number; ms: number };
        rates[p].push(r.count / (r.ms / 1000));
        errs[p] += r.errors;
        if (cpu) {
          cpuUs[p].s += cpu() - c0;
          cpuUs[p].sys += sys!() - s0;
          cpuUs[p].n += r.count;
        }
      }
      for (const p of paths) {
        const r = (await client(lab, users[p], [
          'setup',
          TARGET.v4,
          '443',
          TARGET.name!,
          String(Math.ceil(SETUP_N / REPS)),
        ])) as { samples: number[] };
        samples[p].push(...r.samples);
      }
    }
    const conns: Record<
      PathName,
      { rate: number; errors: number; cpuUsPerConn: number | null; sysUsPerConn: number | null }
    > = {} as never;
    const setup: Record<PathName, { p50: number; p99: number }> = {} as never;
    for (const p of paths) {
      conns[p] = {
        rate: median(rates[p]),
        errors: errs[p],
        cpuUsPerConn: cpuUs[p].n ? (cpuUs[p].s * 1e6) / cpuUs[p].n : null,
        sysUsPerConn: cpuUs[p].n ? (cpuUs[p].sys * 1e6) / cpuUs[p].n : null,
      };
      setup[p] = { p50: pct(samples[p], 50), p99: pct(samples[p], 99) };
    }
    const load1 = fs.readFileSync('/proc/loadavg', 'utf8').trim();

    const g = (p: BulkPath) => median(bulk[p]);
    // The best of the reps: on this kind of VM a single stream's rate is bimodal (the direct path measured 2.6 and
    // 15 Gbit/s in one run, by where the scheduler put sender and receiver), so a median of 5 can land on either
    // mode; the best rep of each path is the least disturbed one, and the ratio of bests is the steadier figure.
    const best = (p: BulkPath) => Math.max(0, ...bulk[p]);
    const cpuGiB = (p: BulkPath) => median(busy[p]);
    const clientGiB = (p: BulkPath) => median(clientCpu[p]);
    type Row = {
      path: PathName;
      bulkGbit: number;
      connsPerSec: number;
      connErrors: number;
      setupP50ms: number;
      setupP99ms: number;
    };
    const rows: Row[] = paths.map((p) => ({
      path: p,
      bulkGbit: g(p),
      connsPerSec: conns[p].rate,
      connErrors: conns[p].errors,
      setupP50ms: setup[p].p50,
      setupP99ms: setup[p].p99,
    }));
    const f = (n: number, d = 2) => n.toFixed(d);
    const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(8) : c.padStart(14))).join('');
    const cpuConn = (p: PathName) => conns[p].cpuUsPerConn ?? 0;
    process.stdout.write(
      `\nbench/proxy  (lab: veth between two namespaces; ${os.cpus().length} vCPU; warm-up ${WARMUP_MS} ms of connections per path, not counted; loadavg before ${load0} | after ${load1})\n`,
    );
    process.stdout.write(
      line([
        'path',
        'bulk Gbit/s',
        'CPU s/GiB',
        'client s/GiB',
        'TLS conns/s',
        'CPU us/conn',
        'setup p50 ms',
        'setup p99 ms',
      ]) + '\n',
    );
    for (const r of rows)
      process.stdout.write(
        line([
          r.path,
          f(r.bulkGbit),
          f(cpuGiB(r.path)),
          f(clientGiB(r.path)),
          f(r.connsPerSec, 0),
          r.path === 'direct' ? '-' : f(cpuConn(r.path), 0),
          f(r.setupP50ms),
          f(r.setupP99ms),
        ]) + '\n',
      );
    process.stdout.write(
      "(medians of the reps. CPU s/GiB: the whole machine's busy CPU per GiB moved; client s/GiB: the receiving client's own;\n" +
        " CPU us/conn: the proxy process's own CPU per new TLS connection (nginx: its workers). relay: bench/proxy-relay.c,\n" +
        ' no peek, no decision, no log: the floor of a terminating proxy, splicing for bulk, copying for connections)\n',
    );
    const [D, L, N, R] = rows as [Row, Row, Row, Row];
    // Issue 43's targets; the relay's own ratios beside them say where the floor of any terminating proxy is here.
    const checks = [
      ['bulk vs relay', L.bulkGbit / R.bulkGbit, '>= 1.00x', L.bulkGbit / R.bulkGbit >= 1.0, 'bulk'],
      ['bulk vs direct', L.bulkGbit / D.bulkGbit, '(info)', true, 'bulk'],
      ['bulk vs nginx', L.bulkGbit / N.bulkGbit, '(info)', true, 'bulk'],
      ['conns/s vs nginx', L.connsPerSec / N.connsPerSec, '>= 1.20x', L.connsPerSec / N.connsPerSec >= 1.2, 'conns'],
      ['  relay vs nginx', R.connsPerSec / N.connsPerSec, '(floor)', true, 'conns'],
      ['  direct vs nginx', D.connsPerSec / N.connsPerSec, '(floor)', true, 'conns'],
      [
        'CPU/conn vs nginx',
        cpuConn('leash') / cpuConn('nginx'),
        '<= 0.80x',
        cpuConn('leash') / cpuConn('nginx') <= 0.8,
        'conns',
      ],
      ['  relay vs nginx', cpuConn('relay') / cpuConn('nginx'), '(floor)', true, 'conns'],
      // nginx's own kernel time over its whole CPU: what a proxy making nginx's system calls spends in the kernel
      // alone, before any user-space work of its own.
      ['  nginx kernel share', (conns.nginx.sysUsPerConn ?? 0) / cpuConn('nginx'), '(floor)', true, 'conns'],
      ['  Leash vs relay', cpuConn('leash') / cpuConn('relay'), '(info)', true, 'conns'],
    ] as const;
    process.stdout.write('\nLeash ratios (issue 43):\n');
    for (const [name, v, want, ok, phase] of checks) {
      // A skipped phase has no samples to divide, and says so rather than NaN/MISSED.
      if ((SKIP_BULK && phase === 'bulk') || (SKIP_CONNS && phase === 'conns')) {
        process.stdout.write(`  ${name.padEnd(22)} skipped (--skip-${phase})\n`);
        continue;
      }
      const verdict = want.startsWith('(') ? '' : ok ? '  met' : '  MISSED';
      process.stdout.write(
        `  ${name.padEnd(22)} ${f(v)}x  ${want.startsWith('(') ? want : `target ${want}`}${verdict}\n`,
      );
    }
    const dP99 = L.setupP99ms - D.setupP99ms;
    process.stdout.write(
      SKIP_CONNS
        ? `  ${'p99 set-up vs direct'.padEnd(22)} skipped (--skip-conns)\n`
        : `  ${'p99 set-up vs direct'.padEnd(22)} ${dP99 >= 0 ? '+' : ''}${f(dP99)} ms  target <= +2 ms  ${dP99 <= 2 ? 'met' : 'MISSED'}\n`,
    );
    process.stdout.write(
      `  proxy CPU per GiB bulk: Leash ${f(leashCpu / REPS)} s, nginx ${f(nginxCpu / REPS)} s, ` +
        `relay ${f(relayCpu / REPS)} s\n`,
    );
    if (!SKIP_BULK)
      process.stdout.write(
        `  bulk best reps: Leash ${f(best('leash') / best('relay'))}x relay, relay ${f(best('relay') / best('direct'))}x direct; machine CPU per GiB over direct's: relay ${f(cpuGiB('relay') / cpuGiB('direct'))}x, Leash ${f(cpuGiB('leash') / cpuGiB('direct'))}x, nginx ${f(cpuGiB('nginx') / cpuGiB('direct'))}x\n`,
      );
    if (!SKIP_CONNS)
      process.stdout.write(
        `  CPU us/conn, system part: ${(['leash', 'nginx', 'relay'] as const).map((p) => `${p} ${f(conns[p].sysUsPerConn ?? 0, 0)} of ${f(cpuConn(p), 0)}`).join(', ')}\n`,
      );
    process.stdout.write(`  errors: ${paths.map((p) => `${p} ${conns[p].errors}`).join(', ')}\n`);
    process.stdout.write(
      `  bulk samples (Gbit/s): ${bulkPaths.map((p) => `${p} ${bulk[p].map((x) => f(x)).join('/')}`).join('; ')}\n`,
    );
    process.stdout.write(
      `  conns/s samples: ${paths.map((p) => `${p} ${rates[p].map((x) => f(x, 0)).join('/')}`).join('; ')}\n`,
    );
    const ji = args.indexOf('--json');
    if (ji >= 0) {
      fs.writeFileSync(
        args[ji + 1]!,
        JSON.stringify(
          {
            load0,
            load1,
            rows,
            bulk,
            machineCpuPerGiB: busy,
            conns,
            leashCpuPerGiB: leashCpu / REPS,
            nginxCpuPerGiB: nginxCpu / REPS,
            relayCpuPerGiB: relayCpu / REPS,
          },
          null,
          2,
        ),
      );
    }
    const ngxLog = path.join(lab.dir, 'nginx-error.log');
    const errLines = fs.existsSync(ngxLog) ? fs.readFileSync(ngxLog, 'utf8').trim().split('\n').filter(Boolean) : [];
    if (errLines.length)
      process.stdout.write(`  nginx error log: ${errLines.length} lines, last: ${errLines.at(-1)}\n`);
    // Which way Leash's connections went (native verdict path or JavaScript): the enforcer's counts on SIGUSR2.
    const seen = enforcer.stderr().split('proxy-path ').length;
    process.kill(enforcer.pid, 'SIGUSR2');
    for (let i = 0; i < 100 && enforcer.stderr().split('proxy-path ').length === seen; i++)
      await new Promise((r) => setTimeout(r, 20));
    const pathLine = /proxy-path (\{.*\})/.exec(enforcer.stderr().split('\n').reverse().join('\n'));
    if (pathLine) process.stdout.write(`  Leash connections by path: ${pathLine[1]}\n`);
    await enforcer.stop();
  } finally {
    const problems = await cleanups.run();
    if (problems.length) process.stderr.write(`teardown problems: ${problems.join('; ')}\n`);
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench/proxy: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
