// The service's side of the watcher: spawns it with the current map, forwards every
// change over the map protocol and waits for the acknowledgement, and keeps a STANDBY
// watcher beside it: a second process that holds the same fanotify group (taken from the
// active one with pidfd_getfd) and the active's in-flight table, and takes over reading the
// moment the active dies — so the group never closes and no event is let through unjudged
// (docs/filesystem.md, "When the watcher dies"). With no standby ready, a dead watcher is
// respawned from the current map (the group closed with it: the kernel let pending events
// through). It gives up — a fatal error for the service to exit on — when watchers die more
// than `maxDeaths` times in `windowMs`.
//
// In three files: this one (the options, and every request routed to a watcher that has the current
// map: set, status, reopen), takeover.ts (active and standby, respawn, takeover, the death count) and
// watcher-proc.ts (one watcher process: spawn, its channel and pending requests, stop).
import { LeashError } from '../../errors.js';
import type { FailMode, Surface, SurfaceStatus, Withdrawn } from '../contract.js';
import type { Asker } from '../../engine/approval.js';
import type { FsCmdPolicy, WatcherSubject } from './addon.js';
import { createHoldRelay, holdArgs, type HoldBounds } from './hold-relay.js';
import type { FromWatcher, WatcherStatus } from './protocol.js';
import { adoptOrStart, tookOver, type Succession } from './takeover.js';
import { defaultScript, endProc, request, stopProc, type Proc, type Request } from './watcher-proc.js';

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
  /**
   * The adoption socket (the runtime directory's watcher.sock): a watcher this service's end leaves without a
   * release waits there, and this supervisor's start adopts one waiting there (adopt.ts). Absent: none.
   */
  adoptSocket?: string;
  /** Called when the start adopted an earlier service's watcher instead of spawning one. */
  onAdopt?: (info: { pid: number }) => void;
  /** Keep standby watchers on the same group (default true). */
  standby?: boolean;
  /**
   * How many (default 2): with one, the group closes, and the opens in flight are let through, when that standby
   * dies with the active, or the new active dies before its own standby is ready (about 0.5 s after a takeover).
   */
  standbys?: number;
  /** Called once when standbys are given up (a standby could not take the group twice in a row). */
  onStandbyUnavailable?: (why: string) => void;
  /**
   * The approvals queue: an open or exec an ask entry covers is held by the watcher (native/watcher/hold.h) and asked
   * here; the outcome is the watcher's answer. Absent: the watcher denies an ask at once (approval_unavailable).
   */
  ask?: Asker;
  /** The watcher's bounds on held events and the surfaces' deadlines (ms): config approvals. */
  hold?: HoldBounds;
  /** The floor's fail_mode for "no policy" entries until setFailMode says otherwise (default closed). */
  failMode?: FailMode;
}

/** The supervisor is the filesystem surface itself (src/dataplane/contract.ts): apply, deny and orphan set map entries. */
export interface FsSupervisor extends Surface<WatcherSubject> {
  /** Resolves when the first watcher has acknowledged the starting map and put its marks on. */
  ready: Promise<WatcherStatus>;
  /**
   * Sets one subject's policy (null = no policy: denied, or allowed under fail_mode open) and
   * resolves once a running watcher has it. A subject is never removed.
   */
  set(uid: number, policy: FsCmdPolicy | null, failMode?: 'closed' | 'open'): Promise<void>;
  /** `set` for many subjects in one request (one acknowledgement for all); a refusal refuses all of them. */
  setMany(list: WatcherSubject[]): Promise<void>;
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

// Waits for a watcher that has the current map (the running one, or the next respawn).
async function settle(st: Succession): Promise<WatcherStatus> {
  for (;;) {
    if (st.fatal) throw st.fatal;
    if (st.closing) throw new Error('supervisor closed');
    const c = st.current;
    try {
      return await c;
    } catch (e) {
      if (c === st.current) {
        // The failed spawn's exit handler has not run yet; give it a moment.
        await new Promise((r) => setTimeout(r, 50));
        if (c === st.current && (st.fatal || st.closing || !st.act)) throw st.fatal ?? e;
      }
    }
  }
}

// Sends a request to a watcher that has the current map; retried on the next one if it dies.
async function call(st: Succession, msg: Request): Promise<FromWatcher> {
  for (;;) {
    await settle(st);
    const a = st.act;
    try {
      return await request(st, a, msg);
    } catch (e) {
      if (st.fatal || st.closing) throw st.fatal ?? e;
      // Wait for the exit handler to install the successor before retrying.
      const t0 = Date.now();
      while (st.act === a && a !== null && Date.now() - t0 < 2000) await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/** A map change reaches the standbys too (each must judge with the current map the moment it takes over). */
async function toStandby(st: Succession, msg: Request): Promise<void> {
  await Promise.all(
    st.sbs.map(async (p) => {
      try {
        await p.ready;
        const m = await request(st, p, msg);
        if (!m.ok) throw new Error(m.error);
      } catch {
        // A standby that missed a change must not take over with a stale map: end it (its exit replaces it; ended
        // here, not dead of itself, it is no death).
        if (st.sbs.includes(p)) {
          p.retired = true;
          endProc(p);
        }
      }
    }),
  );
}

/** Starts the watcher and supervises it. */
export function createFsSupervisor(opts: FsSupervisorOptions): FsSupervisor {
  const map = new Map<number, WatcherSubject>();
  for (const s of opts.subjects) map.set(s.uid, s);
  const relay = createHoldRelay(opts.ask, (p, msg) => request(st, p as Proc, msg));
  const st: Succession = {
    map,
    nextId: 1,
    fatal: null,
    spec: {
      ...opts,
      onTakeover: (p) => tookOver(st, p),
      script: opts.script ?? defaultScript(),
      args: [...(opts.args ?? []), ...holdArgs(opts.ask, opts.hold)],
      onAsk: (p, a) => relay.ask(p, a),
    },
    hooks: { ...opts, onProcExit: (p) => relay.gone(p) },
    maxDeaths: opts.maxDeaths ?? 3,
    windowMs: opts.windowMs ?? 10 * 60_000,
    useStandby: (opts.standby ?? true) && (opts.standbys ?? 2) > 0,
    standbys: opts.standbys ?? 2,
    act: null,
    sbs: [],
    heirWait: null,
    current: null as unknown as Promise<WatcherStatus>,
    closing: false,
    deathTimes: [],
    deathCount: 0,
    standbyFailures: 0,
    standbyOff: false,
    standbyWaiters: [],
  };
  st.current = adoptOrStart(st);
  const ready = st.current;

  const setMany = async (list: WatcherSubject[]): Promise<void> => {
    if (list.length === 0) return;
    const before = list.map((s) => [s.uid, map.get(s.uid)] as const);
    for (const s of list) map.set(s.uid, s);
    // A watcher that dies with this in flight is followed by one that has the map. The standby and the active
    // watcher take the change side by side (each rebuilds its map); it is acknowledged once both hold it.
    const msg: Request = list.length === 1 ? { op: 'set', subject: list[0]! } : { op: 'setMany', subjects: list };
    const [, m] = await Promise.all([toStandby(st, msg), call(st, msg)]);
    if (!m.ok) {
      // Refused: the watcher keeps its map, and a respawn must start from that one, not from the refused change.
      for (const [uid, old] of before)
        if (old) map.set(uid, old);
        else map.delete(uid);
      throw new LeashError('watcher_failed', `the watcher refused the map change: ${m.error}`);
    }
  };

  const set: FsSupervisor['set'] = (uid, policy, failMode = policy?.fail_mode ?? 'closed') =>
    setMany([{ uid, policy, failMode }]);
  return {
    ...mapSurface({ set, setMany }, opts.subjects, opts.failMode ?? 'closed'),
    ready,
    set,
    setMany,
    async status() {
      const m = await call(st, { op: 'status' });
      if (!m.ok || !m.status) throw new Error(m.ok ? 'no status' : m.error);
      return m.status;
    },
    async reopenLog() {
      await toStandby(st, { op: 'reopen' });
      const m = await call(st, { op: 'reopen' });
      if (!m.ok) throw new LeashError('watcher_failed', `the watcher could not reopen its decision log: ${m.error}`);
    },
    watcherPid: () => st.act?.pid ?? null,
    standbyPid: () => st.sbs.find((q) => q.status)?.pid ?? null,
    standbyReady() {
      if (!st.useStandby) return Promise.reject(new Error('standby is off'));
      if (st.fatal) return Promise.reject(st.fatal);
      if (st.act !== null && st.sbs.filter((q) => q.status).length >= st.standbys)
        return Promise.resolve(st.sbs[0]!.pid!);
      return new Promise((resolve, reject) => st.standbyWaiters.push({ resolve, reject }));
    },
    deaths: () => st.deathCount,
    async wedgeForTest() {
      const m = await call(st, { op: 'wedge' });
      if (!m.ok) throw new Error(m.error);
    },
    async selfOpenForTest(file) {
      const m = await call(st, { op: 'selfopen', path: file });
      if (!m.ok) throw new Error(m.error);
      return m.bytes ?? 0;
    },
    async close() {
      st.closing = true;
      for (const w of st.standbyWaiters) w.reject(new Error('supervisor closed'));
      st.standbyWaiters = [];
      if (st.heirWait) clearTimeout(st.heirWait.timer);
      // The standbys first: with the active gone one would take over.
      await Promise.all(st.sbs.map((q) => stopProc(q)));
      await stopProc(st.act);
    },
  };
}

/**
 * The filesystem surface over the watcher map: a subject's compiled policy becomes its map entry; deny (a subject that
 * cannot be resolved) and orphan (one that left discovery) set "no policy" under the floor's fail_mode as last pushed,
 * which the watcher denies under closed: never a removed UID, since an absent UID is an allowed UID. Each change
 * resolves once the watcher acknowledged it. The map the watcher started with (acknowledged with `ready`) is not sent
 * twice: the first apply's entries whose policy is the very object the watcher started with are only counted.
 */
export function mapSurface(
  sup: Pick<FsSupervisor, 'set' | 'setMany'>,
  started: WatcherSubject[],
  failMode: FailMode,
): Pick<FsSupervisor, 'surface' | 'apply' | 'deny' | 'orphan' | 'setFailMode' | 'enforcing'> {
  const enforced = new Set<number>();
  let initial: Map<number, unknown> | null = new Map(started.flatMap((s) => (s.policy ? [[s.uid, s.policy]] : [])));
  const withdraw = async (w: Withdrawn) => {
    enforced.delete(w.uid);
    await sup.set(w.uid, null, failMode);
  };
  return {
    surface: 'filesystem',
    async apply(list) {
      const errors = new Map<number, Error>();
      const held = initial;
      initial = null;
      const todo = list.filter((s) => held?.get(s.uid) !== s.policy);
      for (const s of list) if (held?.get(s.uid) === s.policy) enforced.add(s.uid);
      // One map change for all, acknowledged before apply returns: one at a time, each change rebuilt the whole map
      // and rescanned every root (37 s of a start at 1,000 subjects).
      try {
        await sup.setMany(todo);
        for (const s of todo) enforced.add(s.uid);
        return errors;
      } catch {
        // A refused change does not say whose entry it was: one at a time, so that only that subject fails.
      }
      for (const s of todo) {
        try {
          await sup.set(s.uid, s.policy, s.failMode);
          enforced.add(s.uid);
        } catch (e) {
          errors.set(s.uid, e as Error);
        }
      }
      return errors;
    },
    deny: withdraw,
    orphan: withdraw,
    setFailMode: (m) => void (failMode = m),
    enforcing: (): SurfaceStatus => ({ surface: 'filesystem', subjects: enforced.size, uids: [...enforced] }),
  };
}
