/**
 * The console's live stream under 1,000 decisions/s (docs/console.md): a writer appends decision lines to a log
 * file at that rate; the console (its real follower, hub and HTTP server on loopback) serves a fast client (reads
 * everything) and a slow one (a browser that stopped reading: its response is paused for the whole round), both on
 * the console's unix socket. The
 * baseline, in the same run and round after round: `tail -n0 -F` of the same file, with a fast reader and one
 * that never reads (its pipe fills, then tail waits: the file is its buffer). Printed: lines delivered, sampled /
 * dropped counters, the write→receive lag of the fast readers, the slow reader's backlog, and the console's memory.
 *   node dist/bench/console.js [seconds per round = 8] [rounds = 3] [rate = 1000]
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startConsole } from '../src/control/console/server.js';
import { loadConfig } from '../src/control/config/load.js';

const SECONDS = Number(process.argv[2] ?? 8);
const ROUNDS = Number(process.argv[3] ?? 3);
const RATE = Number(process.argv[4] ?? 1000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => pct(xs, 50);
let seq = 0;
const B32 = 'abcdefghijklmnopqrstuvwxyz234567';
const ref = (n: number) => Array.from({ length: 8 }, (_, i) => B32[(n >>> (i * 5)) & 31]).join('');
function lineAt(): string {
  const n = seq++;
  return JSON.stringify({
    ts: new Date().toISOString(),
    ref: ref(n),
    uid: 2001 + (n % 4),
    surface: ['network', 'filesystem', 'commands', 'tools'][n % 4],
    action: n % 3 ? 'allow' : 'block',
    reason: n % 3 ? 'allow_entry' : 'deny_entry',
    subject: { path: `/home/agent/project/src/file-${n}.ts`, pid: 4242 },
    rule: '/home/agent/project',
    t: Date.now(),
  });
}

/** Appends RATE lines/s in 10 ms batches for `ms`; returns how many were written. */
async function writeFor(file: string, ms: number): Promise<number> {
  const fd = fs.openSync(file, 'a');
  const start = Date.now();
  let written = 0;
  while (Date.now() - start < ms) {
    const due = Math.floor(((Date.now() - start) / 1000) * RATE);
    let chunk = '';
    while (written < due) {
      chunk += lineAt() + '\n';
      written++;
    }
    if (chunk) fs.writeSync(fd, chunk);
    await sleep(10);
  }
  fs.closeSync(fd);
  return written;
}

interface Reader {
  lines: number;
  lags: number[];
  sampled: boolean;
  dropped: number;
}
function reader(): Reader & { feed(s: string): void } {
  let buf = '';
  const r = {
    lines: 0,
    lags: [] as number[],
    sampled: false,
    dropped: 0,
    feed(s: string) {
      buf += s;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        const l = buf.slice(0, i);
        buf = buf.slice(i + 1);
        const m = /"t":(\d+)\}/.exec(l);
        if (m && (l.startsWith('data: {"ts"') || l.startsWith('{"ts"'))) {
          r.lines++;
          r.lags.push(Date.now() - Number(m[1]));
        } else if (l.startsWith('data: {"mode"')) {
          const st = JSON.parse(l.slice(6)) as { mode: string; dropped: number };
          if (st.mode === 'sampled') r.sampled = true;
          r.dropped = Math.max(r.dropped, st.dropped);
        }
      }
    },
  };
  return r;
}

async function consoleRound(dir: string) {
  const file = path.join(dir, 'decisions.jsonl');
  fs.writeFileSync(file, '');
  fs.writeFileSync(path.join(dir, 'leash.yaml'), `user: null\nlogging: { decisions: ${file} }\n`);
  const config = loadConfig(path.join(dir, 'leash.yaml')).config;
  global.gc?.();
  const before = process.memoryUsage();
  const srv = await startConsole({
    config: () => config,
    stateDir: path.join(dir, 'state'),
    metricsSocket: null,
    approvals: {
      list: () => Promise.resolve([]),
      decide: () => Promise.reject(new Error('none')),
      subscribe: () => Promise.resolve(() => {}),
    },
    decisionsPath: file,
    // The clients on the unix socket: its buffers are the kernel's default (~200 KiB), where a loopback TCP
    // connection autotunes to megabytes and would hide a stopped reader for tens of seconds.
    socket: path.join(dir, 'console.sock'),
    listen: null,
    tls: null,
    isSubject: () => false,
    operatorUid: () => null,
  });
  const fast = reader();
  const slow = reader();
  const open = (r: ReturnType<typeof reader>, pause: boolean) =>
    new Promise<http.ClientRequest>((resolve) => {
      const req = http.get(
        {
          socketPath: path.join(dir, 'console.sock'),
          path: '/api/events',
          headers: { authorization: `Bearer ${srv.token}` },
        },
        (res) => {
          res.setEncoding('utf8');
          res.on('data', (d: string) => r.feed(d));
          if (pause) {
            // Read the first status event, then stop reading: a tab in the background, a stuck browser.
            setTimeout(() => res.pause(), 50);
          }
          resolve(req);
        },
      );
    });
  const fr = await open(fast, false);
  const sr = await open(slow, true);
  await sleep(200);
  let peakRss = 0;
  let peakBuffered = 0;
  const mem = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
    peakBuffered = Math.max(peakBuffered, srv.hub.stats().maxBuffered);
  }, 100);
  const written = await writeFor(file, SECONDS * 1000);
  await sleep(500);
  clearInterval(mem);
  const clients = srv.hub.clients();
  const st = srv.hub.stats();
  fr.destroy();
  sr.destroy();
  await srv.close();
  return {
    written,
    fast,
    slow: { ...slow, hub: clients[1]! },
    fastHub: clients[0]!,
    peakRssMb: peakRss / 1e6,
    rssGrowthMb: (peakRss - before.rss) / 1e6,
    peakBufferedKb: peakBuffered / 1024,
    published: st.published,
  };
}

/** Bytes tail has read of `file` (its descriptor's position in /proc/PID/fdinfo). */
function tailPos(pid: number, file: string): number {
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === file)
        return Number(/pos:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))?.[1] ?? 0);
    } catch {
      // raced
    }
  }
  return 0;
}

async function tailRound(dir: string) {
  const file = path.join(dir, 'decisions.jsonl');
  fs.writeFileSync(file, '');
  const fast = reader();
  const t1 = spawn('tail', ['-n0', '-F', file], { stdio: ['ignore', 'pipe', 'ignore'] });
  t1.stdout.setEncoding('utf8').on('data', (d: string) => fast.feed(d));
  // The stopped reader: tail writes into a FIFO nobody reads (64 KiB of pipe, then tail waits).
  const fifo = path.join(dir, 'slow.fifo');
  fs.rmSync(fifo, { force: true });
  spawnSync('mkfifo', [fifo]);
  const held = fs.openSync(fifo, 'r+');
  const t2 = spawn('tail', ['-n0', '-F', file], { stdio: ['ignore', held, 'ignore'] });
  await sleep(300);
  let peakRss = 0;
  const mem = setInterval(() => {
    try {
      const s = fs.readFileSync(`/proc/${t2.pid}/status`, 'utf8');
      peakRss = Math.max(peakRss, Number(/VmRSS:\s+(\d+)/.exec(s)?.[1] ?? 0) * 1024);
    } catch {
      // gone
    }
  }, 100);
  const written = await writeFor(file, SECONDS * 1000);
  await sleep(500);
  clearInterval(mem);
  const size = fs.statSync(file).size;
  const behindBytes = size - tailPos(t2.pid!, file);
  t1.kill();
  t2.kill();
  fs.closeSync(held);
  return { written, fast, behindLines: Math.round((behindBytes / size) * written), tailRssMb: peakRss / 1e6 };
}

async function main() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leash-bench-console-'));
  const load = () =>
    os
      .loadavg()
      .map((x) => x.toFixed(2))
      .join(' ');
  console.log(`bench/console: ${RATE} decisions/s, ${SECONDS} s per round, ${ROUNDS} rounds; load before ${load()}`);
  const rows: string[][] = [];
  const fastLagC: number[] = [];
  const fastLagT: number[] = [];
  try {
    for (let r = 1; r <= ROUNDS; r++) {
      const c = await consoleRound(dir);
      const t = await tailRound(dir);
      fastLagC.push(pct(c.fast.lags, 50));
      fastLagT.push(pct(t.fast.lags, 50));
      rows.push([
        `${r}`,
        'console',
        `${c.written}`,
        `${c.fast.lines} (p50 ${pct(c.fast.lags, 50)} ms, p99 ${pct(c.fast.lags, 99)} ms)`,
        `${c.fastHub.dropped}`,
        `${c.slow.hub.delivered} (${c.slow.hub.mode}, dropped ${c.slow.hub.dropped})`,
        `${c.peakBufferedKb.toFixed(0)} KiB`,
        `${c.peakRssMb.toFixed(0)} MB (+${c.rssGrowthMb.toFixed(1)})`,
      ]);
      rows.push([
        `${r}`,
        'tail -F',
        `${t.written}`,
        `${t.fast.lines} (p50 ${pct(t.fast.lags, 50)} ms, p99 ${pct(t.fast.lags, 99)} ms)`,
        '0',
        `${t.written - t.behindLines} (not dropped: behind by ${t.behindLines}, growing; the file is its buffer)`,
        '64 KiB pipe',
        `${t.tailRssMb.toFixed(1)} MB (tail)`,
      ]);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const head = [
    'round',
    'reader',
    'written',
    'fast: delivered (lag)',
    'fast dropped',
    'slow: sent (mode, dropped)',
    'slow buffered (peak)',
    'memory (peak)',
  ];
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((x) => x[i]!.length)));
  const fmt = (x: string[]) => x.map((c, i) => c.padEnd(w[i]!)).join('  ');
  console.log(fmt(head));
  for (const x of rows) console.log(fmt(x));
  console.log(
    `median fast-reader lag: console ${median(fastLagC)} ms, tail -F ${median(fastLagT)} ms; load after ${load()}`,
  );
}

void main();
