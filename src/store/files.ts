/**
 * The one store for Leash's files on disk: atomic replacement (temp file, fsync, rename, fsync the directory), the
 * writer's lock (`<file>.lock`, O_EXCL, owner pid, a dead owner's lock broken) and durable appends (the unbind
 * ledger). The config, the profiles, the bindings and the port map are all written through here.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../errors.js';

/** The policy file is 0640: root writes it, the leashed user's group may read it, nobody else. */
export const CONFIG_MODE = 0o640;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Whether a process runs: it answers signal 0 and is not a zombie its parent has yet to reap. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2));
  } catch {
    return false;
  }
}

function readLockPid(lockPath: string): number | null {
  try {
    const n = Number.parseInt(fs.readFileSync(lockPath, 'utf8').trim(), 10);
    return Number.isInteger(n) && n > 0 ? n : null;
  } catch {
    return null;
  }
}

/**
 * Breaks a lock whose holder is dead. The lock is first renamed aside so two waiters cannot both
 * delete it: only the one whose rename succeeded goes on, and if what it moved turns out to be a
 * fresh lock (a live writer took it between our read and the rename) it is linked back into place
 * (link never replaces an existing file).
 */
function breakStale(lockPath: string, deadPid: number): void {
  const aside = `${lockPath}.stale.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
  try {
    fs.renameSync(lockPath, aside);
  } catch {
    return; // someone else broke it first
  }
  if (readLockPid(aside) !== deadPid) {
    try {
      fs.linkSync(aside, lockPath);
    } catch {
      /* a third writer holds it now; it keeps it */
    }
  }
  fs.rmSync(aside, { force: true });
}

/**
 * Runs `fn` holding `<file>.lock`, an O_EXCL lock file holding the writer's pid. A lock whose pid is
 * no longer alive is stale (a writer that crashed) and is broken; a live one is waited for.
 */
export async function withLock<T>(file: string, fn: () => Promise<T> | T, timeoutMs = 10_000): Promise<T> {
  const lockPath = `${file}.lock`;
  const deadline = Date.now() + timeoutMs;
  let emptySince: number | null = null;
  for (;;) {
    try {
      const fd = fs.openSync(lockPath, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
      try {
        fs.writeSync(fd, `${process.pid}\n`);
      } finally {
        fs.closeSync(fd);
      }
      break;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') {
        throw new LeashError('config_write_failed', `directory of ${file} does not exist`, { file });
      }
      if (code !== 'EEXIST') {
        throw new LeashError('config_write_failed', `cannot create lock ${lockPath}: ${code}`, { file, errno: code });
      }
    }
    const holder = readLockPid(lockPath);
    if (holder !== null && !processAlive(holder)) {
      breakStale(lockPath, holder);
      continue;
    }
    if (holder === null) {
      // Created but not yet written, or written by something else: stale after a grace period.
      emptySince ??= Date.now();
      if (Date.now() - emptySince > 2_000) {
        fs.rmSync(lockPath, { force: true });
        continue;
      }
    } else emptySince = null;
    if (Date.now() > deadline) {
      throw new LeashError(
        'config_lock_timeout',
        `another writer (pid ${holder ?? 'unknown'}) holds ${lockPath}; if no leash command is running, remove that file`,
        { file, lock: lockPath, pid: holder },
      );
    }
    await sleep(20 + Math.floor(Math.random() * 30));
  }
  try {
    return await fn();
  } finally {
    // Only remove the lock if it is still ours (a stale-breaker may have mistaken us for dead).
    if (readLockPid(lockPath) === process.pid) fs.rmSync(lockPath, { force: true });
  }
}

/**
 * Replaces `file` with `text` atomically: a temp file in the same directory (so rename stays on one
 * filesystem), written, given its final mode and owner, fsynced, renamed over the old file, and the
 * directory fsynced so the rename itself survives a crash. At no point does a reader see a partial
 * file or a file with a wider mode; on any failure the old file is untouched and the temp removed.
 */
export function atomicWrite(
  file: string,
  text: string,
  owner: { uid: number; gid: number },
  beforeRename?: (tmp: string) => void,
): void {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`);
  let fd: number | null = null;
  try {
    fd = fs.openSync(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
    const buf = Buffer.from(text, 'utf8');
    let off = 0;
    while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off);
    if (process.getuid?.() === 0) fs.fchownSync(fd, owner.uid, owner.gid);
    fs.fchmodSync(fd, CONFIG_MODE);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fd = null;
    beforeRename?.(tmp);
    fs.renameSync(tmp, file);
  } catch (e) {
    if (fd !== null) fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    if (e instanceof LeashError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    throw new LeashError('config_write_failed', `cannot write ${file}: ${code ?? (e as Error).message}`, {
      file,
      errno: code,
    });
  }
  fsyncDir(dir);
}

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
