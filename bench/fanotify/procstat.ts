/**
 * What bench/fanotify reads of the processes it measures (CPU time from /proc, all threads or the watcher's loop
 * thread alone), how it stops them, the median of its rounds and the ratio of two rows measured in the same rounds.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** CPU time (ns) a process has run, all threads: the steadier figure on a loaded VM. */
export function cpuNs(pid: number): number {
  let s = 0;
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    s += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  }
  return s;
}

/** CPU time (ns) of the watcher's loop thread alone (named leash-loop): the answer path's work. */
export function loopCpuNs(pid: number): number {
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    if (fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim() === 'leash-loop')
      return Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
  }
  return NaN;
}

/** The PID of timeout(1)'s child. */
export function childOf(pid: number): number {
  const kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/);
  return Number(kids[0]);
}

export async function stop(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const done = new Promise<void>((r) => c.once('exit', () => r()));
  // SIGTERM: timeout(1) forwards it to the listener (a SIGKILL would orphan the listener).
  c.kill('SIGTERM');
  await done;
}

export const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)]! : NaN;
};

export interface RatioRow {
  row: string;
  'opens/s ratio': string;
  'per round': string;
  'loop CPU ratio': string;
  'CPU per round': string;
}

/** Row `a` against row `b`, round by round (the rounds are interleaved): opens/s and the loop thread's CPU. */
export function ratioRow(
  rows: Record<string, number[]>,
  loopCpus: Record<string, number[]>,
  a: string,
  b: string,
): RatioRow | null {
  const xa = rows[a];
  const xb = rows[b];
  if (!xa || !xb) return null;
  const per = xa.map((x, i) => x / xb[i]!);
  const ca = loopCpus[a] ?? [];
  const cb = loopCpus[b] ?? [];
  const perCpu = ca.map((x, i) => cb[i]! / x);
  return {
    row: `${a} / ${b}`,
    'opens/s ratio': median(per).toFixed(3) + 'x',
    'per round': per.map((r) => r.toFixed(2)).join(' '),
    'loop CPU ratio': perCpu.length ? median(perCpu).toFixed(3) + 'x' : '-',
    'CPU per round': perCpu.map((r) => r.toFixed(2)).join(' '),
  };
}

/** Writes a run's figures as JSON under the temporary directory; returns the file's path. */
export function saveJson(data: Record<string, unknown>): string {
  const out = path.join(os.tmpdir(), `leash-bench-fanotify-${Date.now()}.json`);
  fs.writeFileSync(out, JSON.stringify(data, null, 2));
  return out;
}
