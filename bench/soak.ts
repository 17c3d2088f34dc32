/**
 * bench/soak: the proxy under load, in the lab, as a leashed account (root; builds its own namespaces).
 *   npm run build && node dist/bench/soak.js        SOAK_SECONDS (default 300) sets the steady phase
 * Phases: baseline -> 1,000 long-lived TLS connections with churn (10/s replaced) -> a burst of 5,000 at once ->
 * a failing upstream (2,000 connects to an allowed address where nothing listens) -> idle. Prints a table:
 * errors, time to serve after the burst, RSS and descriptors of the enforcer against its own baseline, and the
 * enforcer's log lines per phase (bounded: warnings are rate-limited).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { netPolicy } from '../tests/lab/policy.js';
import { teardownOnSignals } from './common.js';
import { buildLab, createCleanups, type Lab, type LabUser } from '../tests/lab/netns.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const HOLD_PORT = 9443;
const TARGET = { v4: '198.18.1.10', name: 'good.lab' };
const STEADY_S = Number(process.env.SOAK_SECONDS ?? 300);
const N = Number(process.env.SOAK_CONNECTIONS ?? 1000);
const BURST = Number(process.env.SOAK_BURST ?? 5000);

/** `user` null: root in the agent namespace, which no leash rule redirects (straight to the upstream). */
async function client(lab: Lab, user: LabUser | null, argv: string[]): Promise<Record<string, number>> {
  const pre = user ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups'] : [];
  const r = await lab.agent([...pre, process.execPath, path.join(here, 'soak-client.js'), ...argv]);
  if (r.code !== 0) throw new Error(`soak client ${argv[0]} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, number>;
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}
const fds = (pid: number) => fs.readdirSync(`/proc/${pid}/fd`).length;
const lines = (s: string) => s.split('\n').filter((l) => l.startsWith('proxy uid=')).length;

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('bench/soak needs root (namespaces, accounts)');
  const cleanups = createCleanups();
  teardownOnSignals(() => cleanups.run());
  try {
    const lab = await buildLab({ id: 'nets', holdTls: HOLD_PORT, cleanups });
    const user = await lab.createUser('leash-ts1');
    const enf = await lab.startEnforcer({
      subjects: [{ uid: user.uid, port: 18444, policy: netPolicy({ allow: ['good.lab', '198.19.2.0/24'] }) }],
    });
    const pid = enf.pid;
    /** The enforcer's own memory figures (SIGUSR2 makes it print one line): where the RSS is. */
    const memory = async (): Promise<string> => {
      process.kill(pid, 'SIGUSR2');
      await new Promise((r) => setTimeout(r, 300));
      const all = enf
        .stderr()
        .split('\n')
        .filter((l) => l.startsWith('memory '));
      const m = all.length ? (JSON.parse(all.at(-1)!.slice(7)) as Record<string, number>) : null;
      return m
        ? `heap ${m.heapUsed}/${m.heapTotal}, buffers ${m.arrayBuffers}, external ${m.external}, released ${m.releases}x`
        : '-';
    };
    const snap = async () => ({ rss: rssMiB(pid), fds: fds(pid), log: lines(enf.stderr()), mem: await memory() });
    // Warm-up: the code paths and the pipe pool exist before the baseline is taken.
    await client(lab, user, ['burst', TARGET.v4, String(HOLD_PORT), TARGET.name, '50', '200']);
    await new Promise((r) => setTimeout(r, 2000));
    const base = await snap();
    const rows: string[][] = [];
    const t0 = Date.now();
    const steady = await client(lab, user, [
      'hold',
      TARGET.v4,
      String(HOLD_PORT),
      TARGET.name,
      String(N),
      String(STEADY_S * 1000),
      '10',
    ]);
    const afterSteady = await snap();
    rows.push([
      `steady: ${N} long-lived TLS, 10/s churn, ${STEADY_S} s`,
      `opened ${steady.opened}, errors ${steady.errors}, min open ${steady.minOpen}, echoes ${steady.pings}`,
      `${(Date.now() - t0) / 1000}`,
    ]);
    // The same burst without the proxy first (root, not redirected): what the client and the lab's TLS server
    // manage on this machine now, the baseline the proxied burst is read against.
    const burstDirect = await client(lab, null, [
      'burst',
      TARGET.v4,
      String(HOLD_PORT),
      TARGET.name,
      String(BURST),
      '3000',
    ]);
    await new Promise((r) => setTimeout(r, 2000));
    const burst = await client(lab, user, ['burst', TARGET.v4, String(HOLD_PORT), TARGET.name, String(BURST), '3000']);
    const alive1 = enf.alive();
    const first = await client(lab, user, ['first', TARGET.v4, '443', TARGET.name]);
    const afterBurst = await snap();
    rows.push([
      `burst: ${BURST} at once, direct (root, no proxy; baseline)`,
      `ok ${burstDirect.ok}, refused ${burstDirect.refused}, errors ${burstDirect.errors}`,
      '',
    ]);
    rows.push([
      `burst: ${BURST} at once, through Leash`,
      `ok ${burst.ok}, refused ${burst.refused}, errors ${burst.errors}; alive ${alive1}`,
      '',
    ]);
    rows.push(['serving after the burst', `first new handshake in ${first.ms} ms`, '']);
    const logBeforeFail = lines(enf.stderr());
    const failing = await client(lab, user, ['fail', '198.19.2.10', '9', '2000']);
    await new Promise((r) => setTimeout(r, 11_000)); // one rate-limit window: the suppressed count is reported
    const failLines = lines(enf.stderr()) - logBeforeFail;
    rows.push(['failing upstream: 2000 connects', `refused ${failing.refused}, enforcer log lines ${failLines}`, '']);
    await new Promise((r) => setTimeout(r, 5000));
    const idle = await snap();
    const alive2 = enf.alive();
    const pctOf = (a: number, b: number) => `${(((a - b) / b) * 100).toFixed(1)}%`;
    console.log(
      `bench/soak  ${new Date().toISOString()}  load ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}  cpus ${os.cpus().length}`,
    );
    console.log('| phase | result | s |\n| --- | --- | --- |');
    for (const r of rows) console.log(`| ${r.join(' | ')} |`);
    console.log(
      '\n| enforcer | baseline | after steady | after burst | idle after load | idle vs baseline |\n| --- | --- | --- | --- | --- | --- |',
    );
    console.log(
      `| RSS MiB | ${base.rss.toFixed(1)} | ${afterSteady.rss.toFixed(1)} | ${afterBurst.rss.toFixed(1)} | ${idle.rss.toFixed(1)} | ${pctOf(idle.rss, base.rss)} |`,
    );
    console.log(
      `| descriptors | ${base.fds} | ${afterSteady.fds} | ${afterBurst.fds} | ${idle.fds} | ${pctOf(idle.fds, base.fds)} |`,
    );
    console.log(
      `| V8 heap used/total, buffers, external (MiB); memory given back | ${base.mem} | ${afterSteady.mem} | ${afterBurst.mem} | ${idle.mem} | |`,
    );
    console.log(`| log lines (total) | ${base.log} | ${afterSteady.log} | ${afterBurst.log} | ${idle.log} | |`);
    console.log(`\nalive at the end: ${alive2}; steady errors: ${steady.errors}`);
    if (!alive2 || (steady.errors ?? 0) > 0) process.exitCode = 1;
  } finally {
    const problems = await cleanups.run();
    if (problems.length) console.error(`teardown: ${problems.join('; ')}`);
  }
}

main().catch((e: unknown) => {
  console.error((e as Error).stack ?? String(e));
  process.exit(1);
});
