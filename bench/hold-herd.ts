// bench/hold-herd: what events held for an approver cost everyone else's opens on the same fanotify group.
//
// The kernel keeps one wait queue per fanotify group for every process blocked in a permission wait
// (fanotify_get_response waits on group->fanotify_data.access_waitq; every answer wakes that whole queue),
// so each answer the watcher writes wakes every held process, which checks its own event and sleeps again.
// This bench measures it with no Leash code in the way: a minimal C listener (bench/fanotify/holder.c)
// holds the opens of one file by N processes and allows everything else; another process then opens
// another file on the same tmpfs. It prints opens/s against N = 0 (same run) and the wake-ups one held
// process took per open of the other. Root: `npm run build && node dist/bench/hold-herd.js [--held 0,1,10,100] [--opens 20000]`.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { benchTmpdir, cleanups, compileC, requireRoot } from './common.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const srcDir = [path.resolve(here, 'fanotify'), path.resolve(here, '..', '..', 'bench', 'fanotify')].find((d) =>
  fs.existsSync(path.join(d, 'holder.c')),
)!;
const { values } = parseArgs({
  options: {
    held: { type: 'string', default: '0,1,10,100' },
    opens: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '2' },
  },
});
const HELD = values.held.split(',').map(Number);
const OPENS = Number(values.opens);
const ROUNDS = Number(values.rounds);
if (HELD.some((n) => !Number.isInteger(n) || n < 0) || !(OPENS > 0) || !(ROUNDS > 0)) {
  console.error('bench/hold-herd: --held takes counts like 0,1,10,100; --opens and --rounds positive integers');
  process.exit(2);
}
requireRoot('bench/hold-herd', 'fanotify, mount');

const tmp = benchTmpdir('leash-bench-herd-');
const holderBin = compileC(srcDir, tmp, 'holder');
const openerBin = compileC(srcDir, tmp, 'opener');
const mnt = path.join(tmp, 'tmpfs');
fs.mkdirSync(mnt);
execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0755', 'tmpfs', mnt]);
cleanups.push(() => execFileSync('umount', [mnt]));
const heldFile = path.join(mnt, 'held');
const freeFile = path.join(mnt, 'free');
fs.writeFileSync(heldFile, 'h');
fs.writeFileSync(freeFile, 'f');

const exited = (c: ChildProcess): Promise<void> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', () => r()));

function wakeups(pid: number): number {
  const m = /^voluntary_ctxt_switches:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]);
}

/** One measurement: n opens of heldFile held, then the other process's opens/s and one held process's wake-ups. */
async function measure(n: number): Promise<{ rate: number; wakePerOpen: number }> {
  const holder = spawn('timeout', ['-s', 'KILL', '300', holderBin, mnt, heldFile], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const held: ChildProcess[] = [];
  try {
    let out = '';
    const seen = (want: RegExp) =>
      new Promise<void>((resolve, reject) => {
        const on = (b: Buffer) => {
          out += b.toString();
          if (want.test(out)) {
            holder.stdout!.off('data', on);
            resolve();
          }
        };
        holder.stdout!.on('data', on);
        holder.once('exit', () => reject(new Error(`holder exited: ${out.slice(-200)}`)));
      });
    await seen(/^ready$/m);
    // Each held process is the opener doing one open, which blocks in the kernel until the group is closed.
    for (let i = 0; i < n; i++) held.push(spawn(openerBin, [heldFile, '1'], { stdio: 'ignore' }));
    if (n > 0) await seen(new RegExp(`^held ${n}$`, 'm'));
    const probe = held[0]?.pid;
    const w0 = probe ? wakeups(probe) : 0;
    const rate = Number(
      execFileSync(openerBin, [freeFile, String(OPENS)], { encoding: 'utf8', timeout: 600_000 }).trim(),
    );
    const w1 = probe ? wakeups(probe) : 0;
    return { rate, wakePerOpen: (w1 - w0) / OPENS };
  } finally {
    // SIGTERM to timeout(1) reaches the holder; its group closes and every held open is allowed.
    holder.kill('SIGTERM');
    await exited(holder);
    await Promise.all(held.map(exited));
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

async function main(): Promise<void> {
  const load0 = os.loadavg();
  const rates = new Map<number, number[]>();
  const wakes = new Map<number, number[]>();
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 ? [...HELD].reverse() : HELD;
    for (const n of order) {
      const m = await measure(n);
      rates.set(n, [...(rates.get(n) ?? []), m.rate]);
      wakes.set(n, [...(wakes.get(n) ?? []), m.wakePerOpen]);
    }
  }
  const base = median(rates.get(HELD.includes(0) ? 0 : HELD[0]!)!);
  console.log(
    `bench/hold-herd: ${OPENS} opens per run by a process that holds nothing, ${ROUNDS} interleaved rounds, tmpfs, ` +
      `${os.cpus().length} vCPU, kernel ${os.release()}\nloadavg before ${load0.map((x) => x.toFixed(2)).join(' ')}, after ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')}`,
  );
  console.table(
    HELD.map((n) => ({
      'events held': n,
      'opens/s (median)': Math.round(median(rates.get(n)!)),
      runs: rates.get(n)!.map(Math.round).join(' '),
      [`vs ${HELD.includes(0) ? 0 : HELD[0]} held`]: (median(rates.get(n)!) / base).toFixed(2) + 'x',
      'wake-ups of one held process per open': n ? median(wakes.get(n)!).toFixed(2) : '-',
    })),
  );
}

await main();
