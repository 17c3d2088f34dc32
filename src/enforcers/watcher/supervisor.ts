// The service's side of the watcher: spawns it with the current map, forwards every
// change over the map protocol and waits for the acknowledgement, and keeps a STANDBY
// watcher beside it: a second process that holds the same fanotify group (taken from the
// active one with pidfd_getfd) and the active's in-flight table, and takes over reading the
// moment the active dies — so the group never closes and no event is let through unjudged
// (docs/filesystem.md, "When the watcher dies"). With no standby ready, a dead watcher is
// respawned from the current map (the group closed with it: the kernel let pending events
// through). It gives up — a fatal error for the service to exit on — when watchers die more
// than `maxDeaths` times in `windowMs`.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Asker } from '../../approvals/contract.js';
import { LeashError } from '../../errors.js';
import type { FsCmdPolicy, WatcherSubject } from '../../native.js';
import {
  lineReader,
  type FromWatcher,
  type ToWatcher,
  type WatcherAsk,
  type WatcherEvent,
  type WatcherStatus,
} from './protocol.js';

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
  /** Called after each respawn or takeover (the new active watcher has the map). */
  onRespawn?: (info: { pid: number; deaths: number; takeover: boolean }) => void;
  /** Keep a standby watcher on the same group (default true). */
  standby?: boolean;
  /** Called once when standbys are given up (a standby could not take the group twice in a row). */
  onStandbyUnavailable?: (why: string) => void;
  /**
   * The approvals queue: an open or exec an ask entry covers is held by the watcher (native/hold.h) and asked
   * here; the outcome is the watcher's answer. Absent: the watcher denies an ask at once (approval_unavailable).
   */
  ask?: Asker;
  /** The watcher's bounds on held events and the surfaces' deadlines (ms): config approvals. */
  hold?: { max: number; perSubject: number; filesystemMs: number; commandsMs: number };
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
  /** PID of the standby watcher once it holds the group, else null. */
  standbyPid(): number | null;
  /** Resolves once a standby holds the group (test hook; rejects when standby is off or the supervisor ends). */
  standbyReady(): Promise<number>;
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
  const useStandby = opts.standby ?? true;
  const deathTimes: number[] = [];
  let deathCount = 0;
  let closing = false;
  let fatal: LeashError | null = null;

  /** One watcher process: its channel, its pending requests, and whether it has acknowledged its map. */
  interface Proc {
    c: ChildProcess;
    chan: net.Socket | null;
    pending: Map<number, Pending>;
    pid: number | null;
    status: WatcherStatus | null;
    ready: Promise<WatcherStatus>;
    role: 'active' | 'standby';
  }
  let act: Proc | null = null;
  let sb: Proc | null = null;
  let nextId = 1;
  let current!: Promise<WatcherStatus>;
  let standbyWaiters: { resolve: (pid: number) => void; reject: (e: Error) => void }[] = [];
  const relay = createHoldRelay(opts.ask, (p, msg) => request(p as Proc, msg));

  const request = (p: Proc | null, msg: DistributiveOmit<ToWatcher, 'id'>): Promise<FromWatcher> =>
    new Promise((resolve, reject) => {
      if (!p || !p.chan || fatal) {
        reject(fatal ?? new Error('watcher not running'));
        return;
      }
      const id = nextId++;
      p.pending.set(id, { resolve, reject });
      p.chan.write(`${JSON.stringify({ ...msg, id })}\n`);
    });

  const giveUp = (err: LeashError): void => {
    if (fatal) return;
    fatal = err;
    for (const w of standbyWaiters) w.reject(err);
    standbyWaiters = [];
    opts.onFatal?.(err);
  };

  const endProc = (p: Proc): void => {
    p.chan?.destroy();
    p.c.kill('SIGTERM');
  };

  const countDeath = (): boolean => {
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
      return false;
    }
    return true;
  };

  const spawnProc = (role: 'active' | 'standby', of?: WatcherStatus): Proc => {
    const extra =
      role === 'standby' && of
        ? ['--standby-of', String(of.pid), '--group-fd', String(of.groupFd), '--table-fd', String(of.tableFd)]
        : [];
    const argv = [
      ...(opts.wrap ?? []),
      process.execPath,
      script,
      '--decisions',
      opts.decisions,
      ...(opts.args ?? []),
      ...holdArgs(opts),
      ...extra,
    ];
    const stderrMode = opts.stderr === undefined || opts.stderr === 'inherit' ? 'inherit' : 'pipe';
    const c = spawn(argv[0]!, argv.slice(1), {
      stdio: ['ignore', 'inherit', stderrMode, 'pipe'],
      env: opts.env ?? process.env,
    });
    const proc: Proc = {
      c,
      chan: c.stdio[3] as net.Socket,
      pending: new Map(),
      pid: null,
      status: null,
      ready: Promise.resolve(null as unknown as WatcherStatus),
      role,
    };
    const s = proc.chan!;
    s.on(
      'data',
      lineReader<FromWatcher | WatcherEvent>(
        (m) => {
          if ('ask' in m) return relay.ask(proc, m.ask);
          const p = proc.pending.get(m.id);
          if (!p) return;
          proc.pending.delete(m.id);
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
    c.on('exit', () => onExit(proc));
    const timeoutMs = opts.readyTimeoutMs ?? 10_000;
    const init = request(proc, { op: 'init', subjects: [...map.values()], watch: opts.watch ?? [] });
    proc.ready = new Promise<WatcherStatus>((resolve, reject) => {
      const t = setTimeout(() => {
        // A watcher that never acknowledges is as good as dead: end it (closing its channel makes
        // it exit; SIGTERM reaches it through a timeout(1) wrapper) and let the exit path decide.
        endProc(proc);
        reject(new Error('watcher did not acknowledge its map in time'));
      }, timeoutMs);
      init.then(
        (m) => {
          clearTimeout(t);
          if (m.ok && m.status) {
            proc.pid = m.status.pid;
            proc.status = m.status;
            resolve(m.status);
          } else {
            endProc(proc);
            reject(new Error(m.ok ? 'no status' : m.error));
          }
        },
        (e: Error) => {
          clearTimeout(t);
          reject(e);
        },
      );
    });
    proc.ready.catch(() => {});
    return proc;
  };

  /** A standby for the active watcher, once the active has its map and its group. */
  let standbyFailures = 0;
  let standbyOff = false;
  const startStandby = (): void => {
    if (!useStandby || standbyOff || closing || fatal || sb) return;
    const a = act;
    if (!a?.status || a.status.groupFd === undefined || a.status.tableFd === undefined) return;
    const p = spawnProc('standby', a.status);
    sb = p;
    p.ready.then(
      () => {
        if (sb !== p) return;
        standbyFailures = 0;
        for (const w of standbyWaiters) w.resolve(p.pid!);
        standbyWaiters = [];
      },
      () => {},
    );
  };

  const startActive = (): Promise<WatcherStatus> => {
    const p = spawnProc('active');
    act = p;
    p.ready.then(
      () => {
        if (act === p) startStandby();
      },
      () => {},
    );
    return p.ready;
  };

  const onExit = (p: Proc): void => {
    relay.gone(p);
    for (const q of p.pending.values()) q.reject(new Error('watcher exited'));
    p.pending.clear();
    p.chan = null;
    if (p === sb) {
      sb = null;
      if (closing || fatal) return;
      if (!p.status) {
        // It never held the group (e.g. pidfd_getfd refused by a system-call filter, or the active gone first):
        // not a watcher death. Twice in a row and standbys are off; the active watcher is untouched.
        standbyFailures++;
        if (standbyFailures >= 2) {
          standbyOff = true;
          opts.onStandbyUnavailable?.(`the standby watcher could not take the group (${standbyFailures} tries)`);
          return;
        }
        startStandby();
        return;
      }
      // A standby that dies is a death like any other (a crash loop must end), then replaced.
      if (countDeath()) startStandby();
      return;
    }
    if (p !== act) return;
    act = null;
    if (closing || fatal) return;
    if (!countDeath()) return;
    const heir = sb;
    if (heir?.status) {
      // The standby's native thread saw the active's pidfd become readable and took over reading
      // the same group (answering the dead watcher's in-flight events first): promote it.
      sb = null;
      act = heir;
      current = Promise.resolve(heir.status);
      opts.onRespawn?.({ pid: heir.pid!, deaths: deathCount, takeover: true });
      startStandby();
      return;
    }
    // No standby held the group: it closed with the watcher (the kernel let pending events
    // through). Respawn from the current map; chains and listeners are not ours to touch.
    if (heir) {
      sb = null;
      endProc(heir);
    }
    current = startActive();
    current.then(
      (st) => opts.onRespawn?.({ pid: st.pid, deaths: deathCount, takeover: false }),
      () => {},
    );
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
          if (c === current && (fatal || closing || !act)) throw fatal ?? e;
        }
      }
    }
  };

  // Sends a request to a watcher that has the current map; retried on the next one if it dies.
  const call = async (msg: DistributiveOmit<ToWatcher, 'id'>): Promise<FromWatcher> => {
    for (;;) {
      await settle();
      const a = act;
      try {
        return await request(a, msg);
      } catch (e) {
        if (fatal || closing) throw fatal ?? e;
        // Wait for the exit handler to install the successor before retrying.
        const t0 = Date.now();
        while (act === a && a !== null && Date.now() - t0 < 2000) await new Promise((r) => setTimeout(r, 20));
      }
    }
  };

  /** A map change reaches the standby too (it must judge with the current map the moment it takes over). */
  const toStandby = async (msg: DistributiveOmit<ToWatcher, 'id'>): Promise<void> => {
    const p = sb;
    if (!p) return;
    try {
      await p.ready;
      const m = await request(p, msg);
      if (!m.ok) throw new Error(m.error);
    } catch {
      // A standby that missed a change must not take over with a stale map: replace it.
      if (sb === p) {
        sb = null;
        endProc(p);
      }
    }
  };

  current = startActive();
  const ready = current;

  return {
    ready,
    async set(uid, policy, failMode = policy?.fail_mode ?? 'closed') {
      const subject: WatcherSubject = { uid, policy, failMode };
      map.set(uid, subject);
      // A watcher that dies with this in flight is followed by one that has the map.
      await toStandby({ op: 'set', subject });
      const m = await call({ op: 'set', subject });
      if (!m.ok) throw new LeashError('watcher_failed', `the watcher refused the map change: ${m.error}`);
    },
    async status() {
      const m = await call({ op: 'status' });
      if (!m.ok || !m.status) throw new Error(m.ok ? 'no status' : m.error);
      return m.status;
    },
    async reopenLog() {
      await toStandby({ op: 'reopen' });
      const m = await call({ op: 'reopen' });
      if (!m.ok) throw new LeashError('watcher_failed', `the watcher could not reopen its decision log: ${m.error}`);
    },
    watcherPid: () => act?.pid ?? null,
    standbyPid: () => (sb?.status ? sb.pid : null),
    standbyReady() {
      if (!useStandby) return Promise.reject(new Error('standby is off'));
      if (fatal) return Promise.reject(fatal);
      if (sb?.status) return Promise.resolve(sb.pid!);
      return new Promise((resolve, reject) => standbyWaiters.push({ resolve, reject }));
    },
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
      for (const w of standbyWaiters) w.reject(new Error('supervisor closed'));
      standbyWaiters = [];
      // The standby first: with the active gone it would take over.
      await stopProc(sb);
      await stopProc(act);
    },
  };
}

/** Ends one watcher process: its channel, SIGTERM, and SIGKILL (to it by PID, then its wrapper) after 3 s. */
async function stopProc(p: { c: ChildProcess; chan: net.Socket | null; pid: number | null } | null): Promise<void> {
  if (!p || p.c.exitCode !== null || p.c.signalCode !== null) return;
  const exited = new Promise<void>((r) => p.c.once('exit', () => r()));
  p.chan?.end();
  p.c.kill('SIGTERM');
  const wpid = p.pid;
  const t = setTimeout(() => {
    // The watcher is our grandchild under a wrapper: kill it by its own PID, then the wrapper.
    if (wpid)
      try {
        process.kill(wpid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    p.c.kill('SIGKILL');
  }, 3000);
  await exited;
  clearTimeout(t);
}

/** The watcher's hold arguments (watcher-main.ts): present only when there is a queue to ask. */
function holdArgs(o: FsSupervisorOptions): string[] {
  if (!o.ask || !o.hold) return [];
  const h = o.hold;
  return [
    '--hold-max',
    String(h.max),
    '--hold-per-subject',
    String(h.perSubject),
    '--hold-filesystem-ms',
    String(h.filesystemMs),
    '--hold-commands-ms',
    String(h.commandsMs),
  ];
}

/**
 * Relays a watcher's held events to the approvals queue and the outcomes back to the watcher that holds
 * them. A watcher that exits has its requests cancelled (the queue answers them approval_cancelled, a
 * block): what it held is answered by its standby's takeover (denied) or, with no standby, was let go
 * with the group.
 */
function createHoldRelay(
  ask: Asker | undefined,
  send: (p: object, msg: DistributiveOmit<ToWatcher, 'id'>) => Promise<FromWatcher>,
): { ask(p: object, a: WatcherAsk): void; gone(p: object): void } {
  const open = new Map<object, Map<number, AbortController>>();
  return {
    ask(p, a) {
      let mine = open.get(p);
      if (!mine) open.set(p, (mine = new Map()));
      const ac = new AbortController();
      mine.set(a.id, ac);
      const what = a.surface === 'commands' ? { binary: a.subject } : { path: a.subject };
      const asked = ask
        ? ask({
            uid: a.uid,
            surface: a.surface,
            what,
            rule: a.rule,
            reason: 'ask_entry',
            pid: a.pid,
            cmdline: a.cmdline,
            sessionKey: a.subject,
            persistEntry: a.subject,
            signal: ac.signal,
          })
        : Promise.resolve({ action: 'block' as const, reason: 'approval_unavailable' as const, request: null });
      void asked.then((outcome) => {
        mine.delete(a.id);
        if (ac.signal.aborted) return;
        send(p, { op: 'answer', hold: a.id, outcome }).catch(() => {
          // The watcher is gone: its standby or the closed group answered the event.
        });
      });
    },
    gone(p) {
      const mine = open.get(p);
      open.delete(p);
      for (const ac of mine?.values() ?? []) ac.abort();
    },
  };
}
