// What the benches share. A bench's teardown: what it made (mounts, accounts, directories), undone in reverse order when the
// process exits, also after a failure or Ctrl-C; one step that fails is reported and the rest still run.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const cleanups: (() => void)[] = [];

function runCleanups(): void {
  while (cleanups.length) {
    try {
      cleanups.pop()!();
    } catch (e) {
      console.error(`cleanup: ${(e as Error).message}`);
    }
  }
}
process.on('exit', runCleanups);

// Asynchronous teardowns (a lab's namespaces, daemons and accounts), run before the process exits on a signal: an
// 'exit' handler cannot wait for them, and a bench stopped by Ctrl-C or `timeout` left its lab running.
const teardowns: (() => Promise<unknown>)[] = [];
let stopping = false;
async function stopOn(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  for (const t of teardowns.reverse()) {
    try {
      await t();
    } catch (e) {
      console.error(`teardown: ${(e as Error).message}`);
    }
  }
  process.exit(128 + (os.constants.signals[signal] ?? 0));
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => void stopOn(sig));
// A reader of the output gone (`| head`): the rest of the output is dropped, and the bench still runs to its own
// teardown instead of dying on the write's EPIPE with its lab left behind.
for (const stream of [process.stdout, process.stderr])
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE' && e.code !== 'ERR_STREAM_DESTROYED') throw e;
  });

/** Runs `teardown` (to completion) before the process exits on SIGINT, SIGTERM or SIGHUP. */
export function teardownOnSignals(teardown: () => Promise<unknown>): void {
  teardowns.push(teardown);
}

/** A new directory under the system's temporary directory, removed at exit. */
export function benchTmpdir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Exits 2 with what the bench needs root for, unless it runs as root. */
export function requireRoot(bench: string, why: string): void {
  if (process.getuid?.() === 0) return;
  console.error(`${bench} needs root (${why})`);
  process.exit(2);
}

/** Compiles `srcDir/<name>.c` into `outDir/<name>` (cc -O2) and returns the program's path. */
export function compileC(srcDir: string, outDir: string, name: string): string {
  const bin = path.join(outDir, name);
  execFileSync('cc', ['-O2', '-o', bin, path.join(srcDir, `${name}.c`)]);
  return bin;
}
