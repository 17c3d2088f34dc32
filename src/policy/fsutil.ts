import fs from 'node:fs';
import path from 'node:path';
import { atomicWrite, withLock } from '../config/write.js';

/** Blocks the thread for `ms` (the CLI is synchronous on purpose: one writer, one lock, no interleaving). */
export function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Test hook: LEASH_TEST_SLOW_WRITE=<point>:<ms> pauses at a named point of a write and touches
 * `<file>.<point>.paused` first, so a test knows the writer is exactly there before it SIGKILLs it.
 */
export function testPause(point: string, file: string): void {
  const spec = process.env.LEASH_TEST_SLOW_WRITE;
  if (!spec) return;
  const [name, ms] = spec.split(':');
  if (name !== point) return;
  fs.writeFileSync(`${file}.${point}.paused`, String(process.pid));
  sleepSync(Number(ms ?? '0'));
}

function fsyncDir(dir: string): void {
  const fd = fs.openSync(dir, 'r');
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The config's atomic writer (temp file, fsync, rename, fsync the directory) for state files:
 * owned root:root, 0640. LEASH_TEST_SLOW_WRITE=before-rename:<ms> pauses before the rename.
 */
export function atomicWriteFileSync(file: string, data: string): void {
  atomicWrite(file, data, { uid: 0, gid: 0 }, () => testPause('before-rename', file));
}

/** Appends one line durably (fsync before returning): the unbind ledger's "no record, no removal". */
export function appendLineDurable(file: string, line: string, mode = 0o640): void {
  const existed = fs.existsSync(file);
  const fd = fs.openSync(file, 'a', mode);
  try {
    fs.writeSync(fd, line.endsWith('\n') ? line : `${line}\n`);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  if (!existed) fsyncDir(path.dirname(file));
}

/** The config's lock (`<file>.lock`, O_EXCL, owner pid, a dead owner's lock broken) around `fn`. */
export async function withFileLock<T>(file: string, fn: () => Promise<T> | T): Promise<T> {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o750 });
  return withLock(file, fn, 30_000);
}
