/**
 * The lab's child processes and undo steps: a command that must succeed, a process started in a namespace that says
 * "ready", its stop by PID, and the LIFO registry teardown runs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import type { RunResult, Runner } from '../../dataplane/network/nft/run.js';

export async function must(runner: Runner, argv: string[], input?: string): Promise<RunResult> {
  const r = await runner(argv, input);
  if (r.code !== 0) throw new Error(`${argv.join(' ')} -> ${r.code}: ${r.stderr.trim()}`);
  return r;
}

export function spawnReady(
  argv: string[],
  what: string,
  timeoutMs = 15_000,
): Promise<{ child: ChildProcess; err: () => string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      err += d;
      if (err.length > 65536) err = err.slice(-32768);
    });
    const rl = readline.createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error(`${what} not ready after ${timeoutMs} ms: ${err}`)), timeoutMs);
    rl.once('line', (line) => {
      clearTimeout(timer);
      if (line.trim() === 'ready') resolve({ child, err: () => err });
      else reject(new Error(`${what}: unexpected "${line}" ${err}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited ${code}: ${err}`));
    });
  });
}

/** Stops a child we started, by its PID: SIGTERM, then SIGKILL after `graceMs`. */
export function stopChild(child: ChildProcess, graceMs = 5000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
    child.kill('SIGTERM');
  });
}

/** A LIFO registry of undo steps. `run` never throws; it returns what failed. */
export interface Cleanups {
  defer(what: string, fn: () => unknown): void;
  run(): Promise<string[]>;
}

export function createCleanups(): Cleanups {
  const steps: { what: string; fn: () => unknown }[] = [];
  let running: Promise<string[]> | null = null;
  return {
    defer: (what, fn) => void steps.push({ what, fn }),
    run() {
      // A second call (Ctrl-C during teardown) waits for the first instead of racing it.
      running ??= (async () => {
        const problems: string[] = [];
        while (steps.length) {
          const c = steps.pop()!;
          try {
            await c.fn();
          } catch (e) {
            problems.push(`${c.what}: ${(e as Error).message}`);
          }
        }
        running = null;
        return problems;
      })();
      return running;
    },
  };
}
