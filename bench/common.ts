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
process.on('SIGINT', () => process.exit(130));

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
