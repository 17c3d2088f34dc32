// The service's side of the watcher: spawns it with the current map, forwards every
// change over the map protocol and waits for the acknowledgement, respawns it when it
// dies (from the current map, touching nothing else), and gives up — a fatal error for
// the service to exit on — when it dies more than `maxDeaths` times in `windowMs`.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeashError } from '../../errors.js';
import type { FsCmdPolicy, WatcherSubject } from '../../native.js';
import { lineReader, type FromWatcher, type ToWatcher, type WatcherStatus } from './protocol.js';

export interface FsSupervisorOptions {
  /** The starting UID -> policy map. */
  subjects: WatcherSubject[];
  /** Extra paths whose filesystems are marked (config `filesystem.watch`). */
  watch?: string[];
  /** The decision sink the watcher opens before its marks: `stdout` or an absolute path. */
  decisions: string;
  /** argv prefix for the watcher (tests: `['timeout', '-s', 'KILL', '120']`). */
  wrap?: string[];
  /** The watcher script (default: watcher-main.js next to this file, or under dist/). */
  script?: string;
  /** Extra watcher arguments (`--spin-us`, `--watchdog-ms`, ...). */
  args?: string[];
  env?: NodeJS.ProcessEnv;
  /** The watcher's stderr (its watchdog dumps): inherited (the journal) or handed to a callback. */
  stderr?: 'inherit' | ((chunk: string) => void);
  /** Deaths tolerated within windowMs before giving up (default 3 in 10 minutes). */
  maxDeaths?: number;
  windowMs?: number;
  /** How long a spawned watcher may take to acknowledge its map. */
  readyTimeoutMs?: number;
  /** Called once when the supervisor gives up; the service should exit so systemd restarts it. */
  onFatal?: (err: LeashError) => void;
  /** Called after each respawn (the new watcher has acknowledged the map). */
  onRespawn?: (info: { pid: number; deaths: number }) => void;
}

export interface FsSupervisor {
  /** Resolves when the first watcher has acknowledged the starting map and put its marks on. */
  ready: Promise<WatcherStatus>;
  /**
   * Sets one subject's policy (null = no policy: denied, or allowed under fail_mode open) and
   * resolves once a running watcher has it. A subject is never removed.
   */
  set(uid: number, policy: FsCmdPolicy | null, failMode?: 'closed' | 'open'): Promise<void>;
  status(): Promise<WatcherStatus>;
  /** The watcher reopens its decision log (after a rotation); resolves once it has. */
  reopenLog(): Promise<void>;
  /** PID of the watcher process itself (not of a wrapper), once it reported. */
  watcherPid(): number | null;
  deaths(): number;
  /** Test hook: blocks the watcher's JavaScript side (needs LEASH_TEST_WEDGE_JS=1 in env). */
  wedgeForTest(): Promise<void>;
  /** Test hook: the watcher opens `file` (and lists its directory) itself (needs LEASH_TEST_WEDGE_JS=1). */
  selfOpenForTest(file: string): Promise<number>;
  close(): Promise<void>;
}

function defaultScript(): string {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const local = path.join(here, 'watcher-main.js');
  if (fs.existsSync(local)) return local;
  // Running from TypeScript sources (tests): use the built watcher.
  return path.resolve(here, '..', '..', '..', 'dist', 'src', 'enforcers', 'watcher', 'watcher-main.js');
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

interface Pending {
  resolve: (m: FromWatcher) => void;
  reject: (e: Error) => void;
}

/** Starts the watcher and supervises it. */
export function createFsSupervisor(opts: FsSupervisorOptions): FsSupervisor {
  const map = new Map<number, WatcherSubject>();
  for (const s of opts.subjects) map.set(s.uid, s);
  const maxDeaths = opts.maxDeaths ?? 3;
  const windowMs = opts.windowMs ?? 10 * 60_000;
  const script = opts.script ?? defaultScript();
  const deathTimes: number[] = [];
  let deathCount = 0;
  let child: ChildProcess | null = null;
  let chan: net.Socket | null = null;
  let pending = new Map<number, Pending>();
  let nextId = 1;
  let pid: number | null = null;
  let closing = false;
  let fatal: LeashError | null = null;
  let current!: Promise<WatcherStatus>;

  const request = (msg: DistributiveOmit<ToWatcher, 'id'>): Promise<FromWatcher> =>
    new Promise((resolve, reject) => {
      if (!chan || fatal) {
        reject(fatal ?? new Error('watcher not running'));
        return;
      }
      const id = nextId++;
      pending.set(id, { resolve, reject });
      chan.write(`${JSON.stringify({ ...msg, id })}\n`);
    });

  const giveUp = (err: LeashError): void => {
    if (fatal) return;
    fatal = err;
    opts.onFatal?.(err);
  };

  const spawnWatcher = (): Promise<WatcherStatus> => {
    const argv = [...(opts.wrap ?? []), process.execPath, script, '--decisions', opts.decisions, ...(opts.args ?? [])];
    const stderrMode = opts.stderr === undefined || opts.stderr === 'inherit' ? 'inherit' : 'pipe';
    const c = spawn(argv[0]!, argv.slice(1), {
      stdio: ['ignore', 'inherit', stderrMode, 'pipe'],
      env: opts.env ?? process.env,
    });
    child = c;
    pid = null;
    const myPending = new Map<number, Pending>();
    pending = myPending;
    const s = c.stdio[3] as net.Socket;
    chan = s;
    s.on(
      'data',
      lineReader<FromWatcher>(
        (m) => {
          const p = myPending.get(m.id);
          if (!p) return;
          myPending.delete(m.id);
          p.resolve(m);
        },
        () => {},
      ),
    );
    s.on('error', () => {});
    if (typeof opts.stderr === 'function') {
      const cb = opts.stderr;
      c.stderr!.on('data', (b: Buffer) => cb(b.toString()));
    }
    c.on('exit', () => {
      if (child === c) {
        child = null;
        chan = null;
      }
      for (const p of myPending.values()) p.reject(new Error('watcher exited'));
      myPending.clear();
      if (closing || fatal) return;
      const now = Date.now();
      deathCount++;
      deathTimes.push(now);
      while (deathTimes.length && deathTimes[0]! < now - windowMs) deathTimes.shift();
      if (deathTimes.length > maxDeaths) {
        giveUp(
          new LeashError(
            'watcher_failed',
            `the filesystem watcher died ${deathTimes.length} times in ${Math.round(windowMs / 1000)} s`,
            { deaths: deathTimes.length },
          ),
        );
        return;
      }
      // Respawn from the current map; chains and listeners are not ours to touch.
      current = spawnWatcher();
      current.then(
        (st) => opts.onRespawn?.({ pid: st.pid, deaths: deathCount }),
        () => {},
      );
    });
    const timeoutMs = opts.readyTimeoutMs ?? 10_000;
    const init = request({ op: 'init', subjects: [...map.values()], watch: opts.watch ?? [] });
    const p = new Promise<WatcherStatus>((resolve, reject) => {
      const t = setTimeout(() => {
        // A watcher that never acknowledges is as good as dead: end it (closing its channel makes
        // it exit; SIGTERM reaches it through a timeout(1) wrapper) and let the exit path decide.
        s.destroy();
        c.kill('SIGTERM');
        reject(new Error('watcher did not acknowledge its map in time'));
      }, timeoutMs);
      init.then(
        (m) => {
          clearTimeout(t);
          if (m.ok && m.status) {
            pid = m.status.pid;
            resolve(m.status);
          } else {
            s.destroy();
            c.kill('SIGTERM');
            reject(new Error(m.ok ? 'no status' : m.error));
          }
        },
        (e: Error) => {
          clearTimeout(t);
          reject(e);
        },
      );
    });
    p.catch(() => {});
    return p;
  };

  // Waits for a watcher that has the current map (the running one, or the next respawn).
  const settle = async (): Promise<WatcherStatus> => {
    for (;;) {
      if (fatal) throw fatal;
      if (closing) throw new Error('supervisor closed');
      const c = current;
      try {
        return await c;
      } catch (e) {
        if (c === current) {
          // The failed spawn's exit handler has not run yet; give it a moment.
          await new Promise((r) => setTimeout(r, 50));
          if (c === current && (fatal || closing || !child)) throw fatal ?? e;
        }
      }
    }
  };

  // Sends a request to a watcher that has the current map; retried on the next one if it dies.
  const call = async (msg: DistributiveOmit<ToWatcher, 'id'>): Promise<FromWatcher> => {
    for (;;) {
      await settle();
      const c = child;
      try {
        return await request(msg);
      } catch (e) {
        if (fatal || closing) throw fatal ?? e;
        // Wait for the exit handler to install the respawn before retrying.
        const t0 = Date.now();
        while (child === c && c !== null && Date.now() - t0 < 2000) await new Promise((r) => setTimeout(r, 20));
      }
    }
  };

  current = spawnWatcher();
  const ready = current;

  return {
    ready,
    async set(uid, policy, failMode = policy?.fail_mode ?? 'closed') {
      const subject: WatcherSubject = { uid, policy, failMode };
      map.set(uid, subject);
      // A watcher that dies with this in flight is respawned from the map, which has it.
      const m = await call({ op: 'set', subject });
      if (!m.ok) throw new LeashError('watcher_failed', `the watcher refused the map change: ${m.error}`);
    },
    async status() {
      const m = await call({ op: 'status' });
      if (!m.ok || !m.status) throw new Error(m.ok ? 'no status' : m.error);
      return m.status;
    },
    async reopenLog() {
      const m = await call({ op: 'reopen' });
      if (!m.ok) throw new LeashError('watcher_failed', `the watcher could not reopen its decision log: ${m.error}`);
    },
    watcherPid: () => pid,
    deaths: () => deathCount,
    async wedgeForTest() {
      const m = await call({ op: 'wedge' });
      if (!m.ok) throw new Error(m.error);
    },
    async selfOpenForTest(file) {
      const m = await call({ op: 'selfopen', path: file });
      if (!m.ok) throw new Error(m.error);
      return m.bytes ?? 0;
    },
    async close() {
      closing = true;
      const c = child;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const exited = new Promise<void>((r) => c.once('exit', () => r()));
      chan?.end();
      c.kill('SIGTERM');
      const wpid = pid;
      const t = setTimeout(() => {
        // The watcher is our grandchild under a wrapper: kill it by its own PID, then the wrapper.
        if (wpid)
          try {
            process.kill(wpid, 'SIGKILL');
          } catch {
            /* already gone */
          }
        c.kill('SIGKILL');
      }, 3000);
      await exited;
      clearTimeout(t);
    },
  };
}
