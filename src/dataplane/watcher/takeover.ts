// Who is the watcher (supervisor.ts): the active process and its standbys, what happens when one exits
// — the standby whose claim on the in-flight table landed first took over (it reads the same fanotify group) and
// says so; it is promoted, and the other standbys already wait on it — or with no standby holding the group a new
// active is spawned from the current map (respawn) — and the death count that makes the supervisor give up. One
// process's spawn and channel are watcher-proc.ts.
import { LeashError } from '../../errors.js';
import { adoptWatcher, releaseOn } from './adopt.js';
import { EXIT_ACTIVE_GONE, type WatcherStatus } from './protocol.js';
import { endProc, spawnProc, type Channels, type Proc, type SpawnSpec } from './watcher-proc.js';

export interface SuccessionHooks {
  onFatal?: (err: LeashError) => void;
  onRespawn?: (info: { pid: number; deaths: number; takeover: boolean }) => void;
  onStandbyUnavailable?: (why: string) => void;
  /** Runs first when any watcher process exits (its held events' requests are cancelled). */
  onProcExit?: (p: Proc) => void;
  /** The first active watcher is one an earlier service left, adopted with the current map (adopt.ts). */
  onAdopt?: (info: { pid: number }) => void;
}

/** The supervisor's state: which processes hold which role, the deaths, and the standby's tries. */
export interface Succession extends Channels {
  readonly spec: SpawnSpec;
  readonly hooks: SuccessionHooks;
  readonly maxDeaths: number;
  readonly windowMs: number;
  readonly useStandby: boolean;
  /** How many standbys to keep: two, so that the group stays held when a standby dies with the active or just after a takeover. */
  readonly standbys: number;
  act: Proc | null;
  /** The standbys, oldest first. */
  sbs: Proc[];
  /** The active died and a standby's takeover is awaited: resolves the promotion's `current` (or the respawn's). */
  heirWait: { resolve: (s: WatcherStatus) => void; reject: (e: Error) => void; timer: NodeJS.Timeout } | null;
  /** Resolves with the status of a watcher that has the current map (the running one, or the next respawn). */
  current: Promise<WatcherStatus>;
  closing: boolean;
  deathTimes: number[];
  deathCount: number;
  standbyFailures: number;
  standbyOff: boolean;
  standbyWaiters: { resolve: (pid: number) => void; reject: (e: Error) => void }[];
}

function giveUp(st: Succession, err: LeashError): void {
  if (st.fatal) return;
  st.fatal = err;
  for (const w of st.standbyWaiters) w.reject(err);
  st.standbyWaiters = [];
  st.hooks.onFatal?.(err);
}

/** Counts a watcher death; false (and the supervisor has given up) when there were too many in the window. */
function countDeath(st: Succession): boolean {
  const now = Date.now();
  st.deathCount++;
  st.deathTimes.push(now);
  while (st.deathTimes.length && st.deathTimes[0]! < now - st.windowMs) st.deathTimes.shift();
  if (st.deathTimes.length > st.maxDeaths) {
    giveUp(
      st,
      new LeashError(
        'watcher_failed',
        `the filesystem watcher died ${st.deathTimes.length} times in ${Math.round(st.windowMs / 1000)} s`,
        { deaths: st.deathTimes.length },
      ),
    );
    return false;
  }
  return true;
}

/** Standbys for the active watcher up to `st.standbys`, once the active has its map and its group. */
function startStandby(st: Succession): void {
  if (!st.useStandby || st.standbyOff || st.closing || st.fatal) return;
  const a = st.act;
  // a.pid null: the active is in another PID namespace (watcher-proc.ts), where --standby-of cannot name it.
  if (!a?.status || a.pid === null || a.status.groupFd === undefined || a.status.tableFd === undefined) return;
  while (st.sbs.length < st.standbys) {
    const p = spawnProc(st, st.spec, 'standby', a.status, (q) => onExit(st, q));
    p.of = a;
    st.sbs.push(p);
    p.ready.then(
      () => {
        if (!st.sbs.includes(p)) return;
        st.standbyFailures = 0;
        if (st.sbs.filter((q) => q.status).length < st.standbys) return;
        for (const w of st.standbyWaiters) w.resolve(st.sbs[0]!.pid!);
        st.standbyWaiters = [];
      },
      () => {},
    );
  }
}

/** A standby says it took over the group (its claim on the in-flight table landed first). */
export function tookOver(st: Succession, p: Proc): void {
  p.tookOver = true;
  // Its active's exit not seen yet: that exit promotes it.
  if (st.act !== null || !st.sbs.includes(p)) return;
  promote(st, p);
}

function promote(st: Succession, heir: Proc): void {
  st.sbs = st.sbs.filter((q) => q !== heir);
  st.act = heir;
  heir.role = 'active';
  const w = st.heirWait;
  st.heirWait = null;
  if (w) {
    clearTimeout(w.timer);
    w.resolve(heir.status!);
  }
  st.current = Promise.resolve(heir.status!);
  st.hooks.onRespawn?.({ pid: heir.pid!, deaths: st.deathCount, takeover: true });
  startStandby(st);
}

/** Spawns the active watcher (its standby follows once it has its map); resolves when it has acknowledged the map. */
export function startActive(st: Succession): Promise<WatcherStatus> {
  const p = spawnProc(st, st.spec, 'active', undefined, (q) => onExit(st, q));
  st.act = p;
  p.ready.then(
    () => {
      if (st.act === p) startStandby(st);
    },
    () => {},
  );
  return p.ready;
}

/**
 * The first active watcher: the one an earlier service left waiting on the adoption socket (its group never
 * closed), with the current map; else a new one. A watcher that answers and refuses the map is released only
 * once the new one has its marks on.
 */
export async function adoptOrStart(st: Succession): Promise<WatcherStatus> {
  const sock = st.spec.adoptSocket;
  if (!sock) return startActive(st);
  const { proc, refused } = await adoptWatcher(st, st.spec, sock, (q) => onExit(st, q));
  if (proc) {
    st.act = proc;
    st.hooks.onAdopt?.({ pid: proc.pid! });
    startStandby(st);
    return proc.status!;
  }
  const ready = startActive(st);
  if (refused)
    ready.then(
      () => releaseOn(refused),
      () => releaseOn(refused),
    );
  return ready;
}

/** A standby that exits: replaced, or standbys given up when it never held the group twice in a row. */
function standbyExited(st: Succession, p: Proc): void {
  st.sbs = st.sbs.filter((q) => q !== p);
  if (st.closing || st.fatal) return;
  if (!p.status) {
    // It never held the group (e.g. pidfd_getfd refused by a system-call filter). One spawned for an active that
    // has died since (it exits EXIT_ACTIVE_GONE when it finds that out first) is not a failure of standbys. Twice in
    // a row and standbys are off; the active is untouched.
    if ((p.of && p.of !== st.act) || p.c.exitCode === EXIT_ACTIVE_GONE) return startStandby(st);
    st.standbyFailures++;
    if (st.standbyFailures >= 2) {
      st.standbyOff = true;
      st.hooks.onStandbyUnavailable?.(`the standby watcher could not take the group (${st.standbyFailures} tries)`);
      return;
    }
    startStandby(st);
    return;
  }
  // A standby that dies is a death like any other (a crash loop must end), then replaced.
  if (p.retired || countDeath(st)) startStandby(st);
}

function onExit(st: Succession, p: Proc): void {
  st.hooks.onProcExit?.(p);
  for (const q of p.pending.values()) q.reject(new Error('watcher exited'));
  p.pending.clear();
  p.chan = null;
  if (st.sbs.includes(p)) {
    standbyExited(st, p);
    return;
  }
  if (p !== st.act) return;
  st.act = null;
  if (st.closing || st.fatal) return;
  if (!countDeath(st)) return;
  // The standbys' native threads saw the active's pidfd become readable; the one whose claim landed first is reading
  // the same group (the dead watcher's in-flight events answered first) and says so: promote it.
  const heir = st.sbs.find((q) => q.tookOver && q.status);
  if (heir) return promote(st, heir);
  if (st.sbs.some((q) => q.status)) {
    // Its word is on the way. None within the limit (every holder gone or wedged): respawn from the map.
    st.current = new Promise<WatcherStatus>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (st.heirWait?.timer !== timer) return;
        st.heirWait = null;
        respawn(st).then(resolve, reject);
      }, HEIR_WAIT_MS);
      st.heirWait = { resolve, reject, timer };
    });
    st.current.catch(() => {});
    return;
  }
  void respawn(st);
}

/** How long the supervisor waits for a standby to say it took over before it respawns from the map. */
const HEIR_WAIT_MS = 5000;

/**
 * No standby holds the group: it closed with the watcher (the kernel let pending events through). Respawn from the
 * current map; chains and listeners are not ours to touch.
 */
function respawn(st: Succession): Promise<WatcherStatus> {
  for (const q of st.sbs) endProc(q);
  st.sbs = [];
  st.current = startActive(st);
  st.current.then(
    (s) => st.hooks.onRespawn?.({ pid: s.pid, deaths: st.deathCount, takeover: false }),
    () => {},
  );
  return st.current;
}
