/**
 * bench/dns: the DNS forwarder's cost, in ONE run in the lab, for three paths to the same lab resolver:
 *   direct    root in the agent namespace (no leash rules) straight to the resolver (198.18.1.53:53)
 *   dnsmasq   another account: an nft redirect of its UDP/53 -> dnsmasq (Debian) on loopback, forwarding to the
 *             resolver (every query names a fresh name and negative answers are not cached: no cache hits), confined to the agent namespace
 *   leash     the leashed account: its chain redirects UDP/53 -> its forwarder (parse, judge, re-build, forward)
 * Measures queries/s with 50 clients (one query in flight each, each path on its own source ports; median of 5 runs of 3 s, interleaved) and latency
 * p50/p99 at one client (2,000 queries each), plus the forwarder's CPU per 1,000 queries. Prints a table with the
 * ratios against the targets (Leash >= 0.8x dnsmasq queries/s; added p99 <= 1 ms over direct).
 * Root only; run by hand: `npm run build && node dist/bench/dns.js` (needs dnsmasq: see bench/README.md).
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { numberArg } from './args.js';
import { netPolicy } from '../tests/lab/policy.js';
import { teardownOnSignals } from './common.js';
import { buildLab, createCleanups, LAB, stopChild, type Lab, type LabUser } from '../tests/lab/netns.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const REPS = numberArg('--reps', 5);
const QPS_MS = numberArg('--qps-ms', 3000);
const CONC = numberArg('--concurrency', 50);
const LAT_N = numberArg('--lat-n', 2000);
const DNSMASQ_PORT = 5353;

type PathName = 'direct' | 'dnsmasq' | 'leash';
/**
 * Each path's own source ports, above the lab's ephemeral range (1024-65000), with dnsmasq's upstream ports kept
 * to 20000-29999: no client socket inherits a conntrack entry (and so the NAT, or none) that another path's
 * socket, or dnsmasq's own upstream query, left on the same source port. With ephemeral ports a leashed client's
 * query sometimes matched the entry of one of dnsmasq's queries to the resolver, was not redirected, and was
 * dropped (EPERM) by its chain; a dnsmasq client's went straight to the resolver.
 */
const SPORT: Record<PathName, number> = { direct: 65100, dnsmasq: 65200, leash: 65300 };

async function client(lab: Lab, user: LabUser | null, argv: string[]): Promise<unknown> {
  const script = path.join(lab.dir, 'dns-client.mjs');
  const pre = user ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'] : [];
  const r = await lab.agent([...pre, process.execPath, script, ...argv]);
  if (r.code !== 0) throw new Error(`client ${argv[0]} failed: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

function cpuSeconds(pid: number): number {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/dns needs root (namespaces, accounts)');
  if (spawnSync('dnsmasq', ['--version']).status !== 0)
    throw new Error('bench/dns needs dnsmasq (apt-get install dnsmasq-base; see bench/README.md)');
  const cleanups = createCleanups();
  teardownOnSignals(() => cleanups.run());
  try {
    const load0 = fs.readFileSync('/proc/loadavg', 'utf8').trim();
    const lab = await buildLab({ id: 'netq', dnsLog: false, cleanups });
    fs.copyFileSync(path.join(here, 'dns-client.js'), path.join(lab.dir, 'dns-client.mjs'));
    fs.chmodSync(path.join(lab.dir, 'dns-client.mjs'), 0o644);
    const leashUser = await lab.createUser('leash-tq1');
    const dnsmasqUser = await lab.createUser('leash-tq2');
    const enforcer = await lab.startEnforcer({
      subjects: [{ uid: leashUser.uid, port: 18443, policy: netPolicy({ allow: ['good.lab'] }) }],
    });
    const nft = await lab.agent(
      ['nft', '-f', '-'],
      `table ip leash_bench {
  chain o { type nat hook output priority -100; policy accept;
    meta skuid ${dnsmasqUser.uid} udp dport 53 redirect to :${DNSMASQ_PORT}
  }
}\n`,
    );
    if (nft.code !== 0) throw new Error(nft.stderr);
    // dnsmasq confined: in the agent namespace only, no resolv.conf, no hosts file, no cache, its own pid file.
    const dm = spawn(
      'ip',
      [
        'netns',
        'exec',
        lab.agentNs,
        'dnsmasq',
        '--keep-in-foreground',
        '--no-resolv',
        '--no-hosts',
        '--no-poll',
        '--bind-interfaces',
        '--listen-address=127.0.0.1',
        `--port=${DNSMASQ_PORT}`,
        `--server=${LAB.dnsV4}`,
        // Every query names a fresh name (and negative answers are not cached), so each one is forwarded, as
        // Leash forwards every query. (--cache-size=0 made dnsmasq 2.89 spin re-sending to the lab resolver.)
        '--no-negcache',
        '--dns-forward-max=1000',
        '--min-port=20000',
        '--max-port=29999',
        '--user=root',
        `--pid-file=${path.join(lab.dir, 'dnsmasq.pid')}`,
        '--log-facility=-',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let dmErr = '';
    dm.stderr!.on('data', (d: Buffer) => (dmErr += d.toString()));
    cleanups.defer(`stop dnsmasq pid ${dm.pid}`, () => stopChild(dm));
    await new Promise((r) => setTimeout(r, 500));
    if (dm.exitCode !== null) throw new Error(`dnsmasq did not start: ${dmErr}`);

    const who: Record<PathName, LabUser | null> = { direct: null, dnsmasq: dnsmasqUser, leash: leashUser };
    const cpuPid: Record<PathName, number | null> = { direct: null, dnsmasq: dm.pid!, leash: enforcer.pid };
    const paths: PathName[] = ['direct', 'dnsmasq', 'leash'];
    // Warm-up, and a check that every path really answers.
    for (const p of paths) {
      const r = (await client(lab, who[p], ['lat', LAB.dnsV4, '53', '50', String(SPORT[p])])) as { us: number[] };
      if (r.us.length < 40) throw new Error(`${p}: only ${r.us.length}/50 answers in the warm-up`);
      // And a short run under load: the forwarder is a long-running process, measured warm (its JIT has compiled
      // the query path), as dnsmasq is.
      await client(lab, who[p], ['qps', LAB.dnsV4, '53', String(CONC), '1500', String(SPORT[p])]);
    }
    const qps: Record<PathName, number[]> = { direct: [], dnsmasq: [], leash: [] };
    const lost: Record<PathName, number> = { direct: 0, dnsmasq: 0, leash: 0 };
    const errors: Record<PathName, number> = { direct: 0, dnsmasq: 0, leash: 0 };
    const cpu: Record<PathName, number[]> = { direct: [], dnsmasq: [], leash: [] };
    for (let rep = 0; rep < REPS; rep++) {
      for (const p of paths) {
        const pid = cpuPid[p];
        const c0 = pid ? cpuSeconds(pid) : 0;
        const r = (await client(lab, who[p], [
          'qps',
          LAB.dnsV4,
          '53',
          String(CONC),
          String(QPS_MS),
          String(SPORT[p]),
        ])) as {
          answers: number;
          lost: number;
          errors?: number;
          ms: number;
        };
        const c1 = pid ? cpuSeconds(pid) : 0;
        qps[p].push((r.answers / r.ms) * 1000);
        lost[p] += r.lost;
        errors[p] += r.errors ?? 0;
        if (process.env.DNS_BENCH_DEBUG) process.stderr.write(`${p} ${JSON.stringify(r)}\n`);
        if (pid) cpu[p].push(((c1 - c0) / r.answers) * 1000 * 1000); // ms of CPU per 1,000 queries
      }
    }
    const lat: Record<PathName, number[]> = { direct: [], dnsmasq: [], leash: [] };
    for (let rep = 0; rep < 2; rep++)
      for (const p of paths) {
        const r = (await client(lab, who[p], ['lat', LAB.dnsV4, '53', String(LAT_N / 2), String(SPORT[p])])) as {
          us: number[];
        };
        lat[p].push(...r.us);
      }
    const load1 = fs.readFileSync('/proc/loadavg', 'utf8').trim();
    if (process.env.DNS_BENCH_DEBUG) process.stderr.write(`enforcer: ${enforcer.stderr()}\n`);
    const rows = paths.map((p) => ({
      path: p,
      qps: median(qps[p]),
      p50: pct(lat[p], 50) / 1000,
      p99: pct(lat[p], 99) / 1000,
      cpu: cpu[p].length ? median(cpu[p]) : null,
      lost: lost[p],
      errors: errors[p],
      rounds: qps[p].map((x) => x.toFixed(0)).join(' / '),
    }));
    const by = Object.fromEntries(rows.map((r) => [r.path, r])) as Record<PathName, (typeof rows)[number]>;
    const out: string[] = [];
    out.push(
      `\nbench/dns  (lab: veth between two namespaces; ${os.cpus().length} vCPU; loadavg before ${load0} | after ${load1})`,
    );
    out.push(
      `${CONC} clients x ${QPS_MS} ms, median of ${REPS}; latency over ${lat.direct.length} queries at one client\n`,
    );
    out.push(
      '| path | queries/s (50 clients) | each round | p50 ms (1 client) | p99 ms (1 client) | forwarder CPU ms / 1,000 q | lost | send errors |',
    );
    out.push('| --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const r of rows)
      out.push(
        `| ${r.path} | ${r.qps.toFixed(0)} | ${r.rounds} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${r.cpu === null ? '-' : r.cpu.toFixed(1)} | ${r.lost} | ${r.errors} |`,
      );
    const ratio = by.leash.qps / by.dnsmasq.qps;
    const added = by.leash.p99 - by.direct.p99;
    out.push('');
    out.push(`Leash / dnsmasq queries/s: ${ratio.toFixed(2)}x (target >= 0.8x: ${ratio >= 0.8 ? 'met' : 'MISSED'})`);
    out.push(
      `Leash added p99 over direct: ${added.toFixed(3)} ms (target <= 1 ms: ${added <= 1 ? 'met' : 'MISSED'}); dnsmasq added ${(by.dnsmasq.p99 - by.direct.p99).toFixed(3)} ms`,
    );
    process.stdout.write(out.join('\n') + '\n');
    const j = args.indexOf('--json');
    if (j >= 0) fs.writeFileSync(args[j + 1]!, JSON.stringify({ rows, load0, load1 }, null, 2));
  } finally {
    const problems = await cleanups.run();
    if (problems.length) process.stderr.write(`cleanup: ${problems.join('; ')}\n`);
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench/dns: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
