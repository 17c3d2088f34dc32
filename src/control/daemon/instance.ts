/**
 * One service per state directory and per runtime directory. A second `leash` on the same directories would take
 * every `leash-*` account into its own policy and share the first's sockets, so it refuses to start, naming the
 * first's PID. The lock is a file in each directory, created O_EXCL, holding the owner's pid, its start time and the
 * boot id: a lock whose owner is not that same process any more (a crash, a reboot, a reused PID) is stale and
 * broken, so a crash never blocks a restart.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../../errors.js';
import { DEFAULT_TOOLS_SOCKET } from '../../paths.js';

const LOCK_NAME = 'leash-service.lock';

interface Owner {
  pid: number;
  start: string;
  boot: string;
}

function bootId(): string {
  try {
    return fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or null when there is no such process. */
function startTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

function readOwner(file: string): Owner | null {
  try {
    const o = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<Owner>;
    return typeof o.pid === 'number' && typeof o.start === 'string' && typeof o.boot === 'string' ? (o as Owner) : null;
  } catch {
    return null;
  }
}

function isAlive(o: Owner): boolean {
  return o.boot === bootId() && startTime(o.pid) === o.start;
}

/** The directories one service owns: its state directory and its runtime directory (where its sockets live). */
export function serviceDirs(env: NodeJS.ProcessEnv): string[] {
  const dirs = [env.LEASH_STATE_DIR ?? '/var/lib/leash', path.dirname(env.LEASH_TOOLS_SOCKET ?? DEFAULT_TOOLS_SOCKET)];
  return [...new Set(dirs.map((d) => path.resolve(d)))];
}

/** Takes the lock of one directory, breaking a stale one; throws service_running when a live service holds it. */
function lockDir(dir: string, me: Owner): string {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const file = path.join(fs.realpathSync(dir), LOCK_NAME);
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o644);
      try {
        fs.writeSync(fd, JSON.stringify(me) + '\n');
      } finally {
        fs.closeSync(fd);
      }
      return file;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const owner = readOwner(file);
    if (owner && isAlive(owner))
      throw new LeashError(
        'service_running',
        `another leash service (pid ${owner.pid}) runs on ${dir} (lock ${file}): stop it first; one service per host`,
        { pid: owner.pid, dir, lock: file },
      );
    // Unreadable right after its creation: give its writer a moment before calling it stale.
    const st = fs.statSync(file, { throwIfNoEntry: false });
    if (!st) continue;
    if (!owner && Date.now() - st.mtimeMs < 1000) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
      continue;
    }
    // Renamed aside first, so two starting services cannot both remove it and both go on.
    const aside = `${file}.stale.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
    try {
      fs.renameSync(file, aside);
      fs.rmSync(aside, { force: true });
    } catch {
      /* another starter broke it first; try again */
    }
  }
  throw new LeashError('service_running', `cannot take the service lock ${file}: it keeps changing hands`, {
    dir,
    lock: file,
  });
}

/** Locks every directory of `dirs` for this process; release() removes the locks that are still its own. */
export function lockService(dirs: string[]): { release(): void } {
  const me: Owner = { pid: process.pid, start: startTime(process.pid) ?? '', boot: bootId() };
  const held: string[] = [];
  const release = () => {
    for (const f of held.splice(0)) if (readOwner(f)?.pid === process.pid) fs.rmSync(f, { force: true });
  };
  try {
    for (const d of dirs) held.push(lockDir(d, me));
  } catch (e) {
    release();
    throw e;
  }
  return { release };
}
