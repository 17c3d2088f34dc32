/**
 * bench/mcp: what `leash mcp` costs per tool call, measured in one run against
 *   direct  — the client talks to the server itself;
 *   relay   — a minimal pass-through line relay (bench/mcp-relay.ts), the floor any stdio gate pays;
 *   parse   — the same relay also reading each request with JSON.parse and looking its tool name up: about the
 *             least a gate that judges calls pays (no log, no argument rules, answers untouched);
 *   leash   — `leash mcp --policy` with a 1,000-rule policy, decisions logged to a file;
 *   leash-ni — the same with tools.inspect all `allow` (no detectors): the gate without inspection.
 *   leash-ops — 1,000 rules over operations (filesystem table), output redaction on (issue #16).
 * Latency: one call in flight, p50/p99 per call. Throughput: 64 calls in flight, calls/s.
 * Gate CPU: user+system time of the middle process per 1,000 calls (steadier than latency on a VM).
 * Rounds are interleaved and the median of each figure is reported.
 * Then the remembering path walk's window (native/tools/walkcache.h): a remembered path's directory is
 * swapped for a symlink, and the time until the walk answers the symlink's target is measured, beside
 * the plain walk's cost per call and the remembered one's.
 *
 *   node dist/bench/mcp.js [--rounds 5] [--lat 3000] [--calls 100000] [--json out.json]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadNative, nativeAvailable } from '../src/native.js';
import { numberArg } from './args.js';
import { createValidatedWalker } from '../src/tools/judge/operations/paths.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const ECHO = path.join(here, 'mcp-echo.js');
const RELAY = path.join(here, 'mcp-relay.js');
const CLI = path.join(root, 'dist', 'src', 'cli', 'main.js');

const argv = process.argv.slice(2);
// Five rounds of 100,000 calls: with 20,000 a throughput window was a quarter of a second, and the
// relay alone moved between 67k and 107k calls/s from run to run on an idle machine.
const ROUNDS = numberArg('--rounds', 5);
const LAT = numberArg('--lat', 3000);
const CALLS = numberArg('--calls', 100000);
const INFLIGHT = 64;
const jsonOut = argv.includes('--json') ? argv[argv.indexOf('--json') + 1] : null;

function writePolicy(dir: string, inspect: boolean): string {
  // 1,000 rules: 500 allowed tools, 300 denied tools, argument rules for 200 tools (the benchmarked
  // tool among them, with an allow rule per argument and a deny rule checked against every value).
  const allow = ['read_file', ...Array.from({ length: 499 }, (_, i) => `tool_${i}`)];
  const deny = Array.from({ length: 300 }, (_, i) => `bad_tool_${i}`);
  const args: Record<string, unknown> = {
    read_file: {
      deny: { '**.path': ['^/etc/', '\\.\\.'] },
      allow: { path: ['^/srv/[a-z/]+\\.txt$'], n: [{ type: 'number' }] },
    },
  };
  for (let i = 0; i < 199; i++) args[`tool_${i}`] = { deny: [`^secret_${i}`], allow: { q: ['^[a-z]+$'] } };
  const file = path.join(dir, inspect ? 'policy.json' : 'policy-noinspect.json');
  const tools: Record<string, unknown> = { mode: 'whitelist', allow, deny, args, hide_denied: true };
  // The default inspection (secrets and priv_esc block) runs the engine's detectors on every call.
  if (!inspect) tools.inspect = { secrets: 'allow', pii: 'allow', priv_esc: 'allow' };
  fs.writeFileSync(file, JSON.stringify({ tools }));
  return file;
}

/**
 * leash-ops: 1,000 rules over operations (the filesystem table declared, output redaction on, the
 * default): 300 fs.write denies, 300 fs.read denies on other trees (each a path glob tried on every
 * call), 399 fs.read allows on other trees and the one that admits the benchmarked read last.
 */
function writeOpsPolicy(dir: string): string {
  const rules: Record<string, unknown>[] = [];
  for (let i = 0; i < 300; i++)
    rules.push({ id: `w${i}`, effect: 'deny', operations: ['fs.write'], resources: [`/data/d${i}/**`] });
  for (let i = 0; i < 300; i++)
    rules.push({ id: `s${i}`, effect: 'deny', operations: ['fs.read'], resources: [`/secret${i}/**`] });
  for (let i = 0; i < 399; i++)
    rules.push({ id: `p${i}`, effect: 'allow', operations: ['fs.read'], resources: [`/proj${i}/**`] });
  rules.push({ id: 'srv', effect: 'allow', operations: ['fs.read'], resources: ['/srv/**'] });
  const file = path.join(dir, 'policy-ops.json');
  fs.writeFileSync(
    file,
    JSON.stringify({ tools: { mapping: 'filesystem', default: 'deny', rules, hide_denied: true } }),
  );
  return file;
}

const request = (id: number) =>
  `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/srv/data/file.txt","n":1}}}\n`;

interface Session {
  child: ChildProcess;
  /** PID of the process between client and server (null for direct). */
  middle: number | null;
  onLine: (cb: (id: number) => void) => void;
}

function start(kind: string, policies: Record<string, string>, logFile: string): Session {
  let child: ChildProcess;
  if (kind === 'direct') child = spawn(process.execPath, [ECHO], { stdio: ['pipe', 'pipe', 'inherit'] });
  else if (kind === 'relay' || kind === 'parse')
    child = spawn(process.execPath, [RELAY, ...(kind === 'parse' ? ['--parse'] : []), process.execPath, ECHO], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
  else
    child = spawn(
      process.execPath,
      [CLI, 'mcp', '--policy', policies[kind]!, '--log', logFile, '--', process.execPath, ECHO],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
  let cb: (id: number) => void = () => undefined;
  let rest = '';
  child.stdout!.on('data', (c: Buffer) => {
    const s = rest + c.toString('utf8');
    let start = 0;
    for (let nl = s.indexOf('\n'); nl >= 0; nl = s.indexOf('\n', start)) {
      const m = JSON.parse(s.slice(start, nl)) as { id: number; error?: unknown };
      if (m.error) throw new Error(`${kind}: call failed: ${s.slice(start, nl)}`);
      cb(m.id);
      start = nl + 1;
    }
    rest = s.slice(start);
  });
  return { child, middle: kind === 'direct' ? null : child.pid!, onLine: (f) => (cb = f) };
}

function cpuMs(pid: number | null): number {
  if (pid === null) return 0;
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const parts = f.slice(f.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(parts[11]) + Number(parts[12]);
  return (ticks * 1000) / 100; // USER_HZ is 100 on Linux
}

async function latency(s: Session, n: number, idBase: number): Promise<number[]> {
  const out: number[] = [];
  let t0 = 0n;
  let resolveOne: () => void = () => undefined;
  s.onLine(() => {
    out.push(Number(process.hrtime.bigint() - t0) / 1000);
    resolveOne();
  });
  for (let i = 0; i < n; i++) {
    const p = new Promise<void>((r) => (resolveOne = r));
    t0 = process.hrtime.bigint();
    s.child.stdin!.write(request(idBase + i));
    await p;
  }
  return out;
}

async function throughput(s: Session, n: number, idBase: number): Promise<{ rate: number; cpuPer1k: number }> {
  let sent = 0;
  let got = 0;
  const cpu0 = cpuMs(s.middle);
  const t0 = process.hrtime.bigint();
  await new Promise<void>((resolve) => {
    s.onLine(() => {
      got++;
      if (sent < n) s.child.stdin!.write(request(idBase + sent++));
      if (got === n) resolve();
    });
    let burst = '';
    for (; sent < Math.min(INFLIGHT, n); sent++) burst += request(idBase + sent);
    s.child.stdin!.write(burst);
  });
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  return { rate: n / secs, cpuPer1k: ((cpuMs(s.middle) - cpu0) / n) * 1000 };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => pct(xs, 50);

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-bench-mcp-'));
  const policies = {
    leash: writePolicy(dir, true),
    'leash-ni': writePolicy(dir, false),
    'leash-ops': writeOpsPolicy(dir),
  };
  const kinds = ['direct', 'relay', 'parse', 'leash', 'leash-ni', 'leash-ops'];
  const res: Record<string, { p50: number[]; p99: number[]; rate: number[]; cpu: number[] }> = {};
  for (const k of kinds) res[k] = { p50: [], p99: [], rate: [], cpu: [] };
  const load = os.loadavg()[0]!;
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (const k of r % 2 ? [...kinds].reverse() : kinds) {
        const s = start(k, policies, path.join(dir, `decisions-${k}.jsonl`));
        await latency(s, 300, 1_000_000); // warm-up (JIT, pipes)
        const lat = await latency(s, LAT, 2_000_000);
        const tp = await throughput(s, CALLS, 3_000_000);
        s.child.stdin!.end();
        await new Promise((resolve) => s.child.on('exit', resolve));
        res[k]!.p50.push(pct(lat, 50));
        res[k]!.p99.push(pct(lat, 99));
        res[k]!.rate.push(tp.rate);
        res[k]!.cpu.push(tp.cpuPer1k);
      }
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const m = (k: string, f: 'p50' | 'p99' | 'rate' | 'cpu') => median(res[k]![f]);
  const rows = kinds.map((k) => ({
    mode: k,
    calls_per_s: Math.round(m(k, 'rate')),
    p50_us: +m(k, 'p50').toFixed(1),
    p99_us: +m(k, 'p99').toFixed(1),
    added_p50_us: +(m(k, 'p50') - m('direct', 'p50')).toFixed(1),
    vs_relay_rate: +(m(k, 'rate') / m('relay', 'rate')).toFixed(2),
    gate_cpu_ms_per_1k: k === 'direct' ? null : +m(k, 'cpu').toFixed(1),
  }));
  const pad = (s: unknown, n: number) => String(s).padStart(n);
  console.log(
    `bench/mcp: ${ROUNDS} rounds (median), latency ${LAT} calls at 1 in flight, throughput ${CALLS} calls at ${INFLIGHT} in flight`,
  );
  console.log(
    `machine: ${os.cpus().length} vCPU, load average before the run ${load.toFixed(2)}, node ${process.version}`,
  );
  console.log(
    `${'mode'.padEnd(8)}${pad('calls/s', 10)}${pad('p50 µs', 9)}${pad('p99 µs', 9)}${pad('+p50 µs', 9)}${pad('x relay', 9)}${pad('cpu ms/1k', 11)}`,
  );
  for (const r of rows)
    console.log(
      `${r.mode.padEnd(9)}${pad(r.calls_per_s, 10)}${pad(r.p50_us, 9)}${pad(r.p99_us, 9)}${pad(r.added_p50_us, 9)}${pad(r.vs_relay_rate, 9)}${pad(r.gate_cpu_ms_per_1k ?? '-', 11)}`,
    );
  for (const leash of rows.slice(3))
    console.log(
      `targets (${leash.mode}): +p50 ${leash.added_p50_us} µs (<= ${leash.mode === 'leash-ops' ? 150 : 200}: ${leash.added_p50_us <= (leash.mode === 'leash-ops' ? 150 : 200) ? 'met' : 'MISSED'}), ` +
        `calls/s ${leash.vs_relay_rate}x relay (>= 0.8: ${leash.vs_relay_rate >= 0.8 ? 'met' : 'MISSED'})`,
    );
  // Each round's own ratio (the relay measured minutes apart can be a different machine): the spread.
  for (const k of kinds.slice(2)) {
    // parse: the relay that also parses each request and looks its tool name up (the floor of a judging gate).
    const per = res[k]!.rate.map((r, i) => r / res.relay!.rate[i]!).sort((a, b) => a - b);
    console.log(`${k} x relay per round: ${per.map((x) => x.toFixed(2)).join(' ')} (median ${median(per).toFixed(2)})`);
  }
  const walk = nativeAvailable() ? walkWindow() : null;
  if (walk !== null)
    console.log(
      `remembering walk: plain walk ${walk.plain_ns} ns/call, remembered by the addon ${walk.cached_ns} ns/call, ` +
        `by the gate's walker (its memo) ${walk.gate_ns} ns/call; ` +
        `after a directory is swapped for a symlink, stale for p50 ${walk.stale_p50_us} µs, p99 ${walk.stale_p99_us} µs, ` +
        `max ${walk.stale_max_us} µs (${walk.swaps} swaps; ${walk.first_fresh} of them already seen by the first walk after)`,
    );
  const result = { when: new Date().toISOString(), rounds: ROUNDS, loadavg: load, rows, raw: res, walk };
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(result, null, 2));
}

/**
 * How stale the remembering walk can be: a remembered path's middle directory is renamed away and a
 * symlink put in its place, then the walk is asked in a tight loop until it answers the symlink's
 * target. The time from the symlink's creation to that answer is the window a per-call walk would
 * not have (it has its own: the gate's check to the server's open).
 */
function walkWindow(): {
  plain_ns: number;
  cached_ns: number;
  gate_ns: number;
  stale_p50_us: number;
  stale_p99_us: number;
  stale_max_us: number;
  swaps: number;
  first_fresh: number;
} {
  const n = loadNative();
  const native = new n.WalkCache();
  // The window is measured on what the gate uses: the addon's memory behind the JavaScript memo.
  const c = createValidatedWalker();
  if (c === null) throw new Error('walk cache: the gate walker is not available');
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-bench-walk-'));
  try {
    const p = path.join(base, 'file.txt');
    const N = 200_000;
    let t = process.hrtime.bigint();
    for (let i = 0; i < N; i++) n.walkPath(p);
    const plain = Number(process.hrtime.bigint() - t) / N;
    t = process.hrtime.bigint();
    for (let i = 0; i < N; i++) native.walk(p);
    const cached = Number(process.hrtime.bigint() - t) / N;
    t = process.hrtime.bigint();
    for (let i = 0; i < N; i++) c.walk(p);
    const gate = Number(process.hrtime.bigint() - t) / N;
    const stale: number[] = [];
    let firstFresh = 0;
    const swaps = 500;
    for (let r = 0; r < swaps; r++) {
      const dir = path.join(base, `d${r}`);
      fs.mkdirSync(path.join(dir, 'ws', 'sub'), { recursive: true });
      const q = path.join(dir, 'ws', 'sub', 'passwd');
      c.walk(q);
      if (c.walk(q) !== q) throw new Error('walk cache: a plain path did not walk to itself');
      fs.renameSync(path.join(dir, 'ws', 'sub'), path.join(dir, 'ws', 'old'));
      fs.symlinkSync(base, path.join(dir, 'ws', 'sub'));
      const t0 = process.hrtime.bigint();
      let k = 0;
      while (c.walk(q) === q) k++;
      stale.push(Number(process.hrtime.bigint() - t0) / 1000);
      if (k === 0) firstFresh++;
    }
    return {
      plain_ns: Math.round(plain),
      cached_ns: Math.round(cached),
      gate_ns: Math.round(gate),
      stale_p50_us: +pct(stale, 50).toFixed(1),
      stale_p99_us: +pct(stale, 99).toFixed(1),
      stale_max_us: +pct(stale, 100).toFixed(1),
      swaps,
      first_fresh: firstFresh,
    };
  } finally {
    c.close();
    native.close();
    fs.rmSync(base, { recursive: true, force: true });
  }
}

void main();
