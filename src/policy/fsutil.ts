import fs from 'node:fs';
import path from 'node:path';
import { PolicyError } from './errors.js';

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
 * Writes a file so a reader sees the old content or the new, never a torn one:
 * a temp file in the same directory, fsync, rename over, fsync the directory.
 */
export function atomicWriteFileSync(file: string, data: string, mode = 0o640): void {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const fd = fs.openSync(tmp, 'w', mode);
  try {
    fs.writeSync(fd, data);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    testPause('before-rename', file);
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  fsyncDir(dir);
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

function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function ageMs(file: string): number {
  try {
    return Date.now() - fs.statSync(file).mtimeMs;
  } catch {
    return 0;
  }
}

function readOwner(lockFile: string): number | null {
  try {
    return Number.parseInt(fs.readFileSync(lockFile, 'utf8'), 10);
  } catch {
    return null;
  }
}

/**
 * Takes a lock file held by a dead writer. A second lock (`.steal`) serialises stealers, so two
 * waiters that both saw the dead owner cannot both remove it (the second would remove the first's live lock).
 */
function tryStealDead(lockFile: string, isDead: () => boolean): void {
  const steal = `${lockFile}.steal`;
  let fd: number;
  try {
    fd = fs.openSync(steal, 'wx', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    // A stealer killed inside the few microseconds it holds this: clear it once it is clearly old.
    try {
      if (Date.now() - fs.statSync(steal).mtimeMs > 10_000) fs.rmSync(steal, { force: true });
    } catch {
      /* gone already */
    }
    return;
  }
  try {
    if (isDead()) fs.rmSync(lockFile, { force: true });
  } finally {
    fs.closeSync(fd);
    fs.rmSync(steal, { force: true });
  }
}

export interface LockOptions {
  /** How long to wait for another writer before giving up (ms). */
  timeoutMs?: number;
}

/**
 * Runs `fn` holding an exclusive lock file (O_EXCL, owner pid inside). A lock whose owner is dead
 * (a writer SIGKILLed mid-save) is taken over; a live owner is waited for, then `state_locked`.
 */
export function withLockSync<T>(lockFile: string, fn: () => T, opts: LockOptions = {}): T {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  fs.mkdirSync(path.dirname(lockFile), { recursive: true, mode: 0o750 });
  let delay = 2;
  for (;;) {
    try {
      const fd = fs.openSync(lockFile, 'wx', 0o600);
      fs.writeSync(fd, String(process.pid));
      fs.closeSync(fd);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const owner = readOwner(lockFile);
    if (owner !== null && !Number.isNaN(owner) && !pidAlive(owner)) {
      tryStealDead(lockFile, () => readOwner(lockFile) === owner && !pidAlive(owner));
      continue;
    }
    if (owner !== null && Number.isNaN(owner) && ageMs(lockFile) > 5_000) {
      // Killed between creating the lock and writing its pid: nobody will ever release it.
      tryStealDead(lockFile, () => Number.isNaN(readOwner(lockFile)) && ageMs(lockFile) > 5_000);
      continue;
    }
    if (Date.now() > deadline) {
      throw new PolicyError('state_locked', `another leash writer holds ${lockFile} (pid ${owner})`, {
        lock: lockFile,
        pid: owner,
      });
    }
    sleepSync(delay);
    delay = Math.min(delay * 2, 50);
  }
  try {
    return fn();
  } finally {
    if (readOwner(lockFile) === process.pid) fs.rmSync(lockFile, { force: true });
  }
}
