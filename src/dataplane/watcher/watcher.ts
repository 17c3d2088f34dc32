// The watcher's JavaScript side: holds the UID -> policy map, hands snapshots to the
// native loop, puts marks on every filesystem a subject's paths live on (and re-scans
// for new ones), and writes the decision-log lines the loop formatted to the log.
import fs from 'node:fs';
import path from 'node:path';
import type { DecisionRecord } from '../../log/decisions.js';
import type { HeldAsk, NativeWatcher, NativeWatcherPart, WatcherOptions, WatcherSubject } from './addon.js';
import { createNamespaceScanner, type NamespaceScanner } from './namespaces.js';
import { createForeignPidLog, pidNsOf } from './pidns.js';
import { parseMountinfo, policyRoots } from './policy.js';
import type { WatcherStatus } from './protocol.js';

export interface WatcherCoreOptions {
  native: NativeWatcherPart;
  /**
   * The decision log: `writeLines` gets a drain's whole lines (formatted by the native loop exactly
   * as `formatDecision` would, see native/watcher/decisionline.cc) for one write(2).
   */
  log: {
    writeLines(lines: Buffer): void;
    write?(rec: DecisionRecord): string;
    countAllows?(uid: number, surface: 'filesystem' | 'commands', allowed: number, written: number): void;
  };
  /** config logging.allows: how the native loop treats plain allows (see WatcherOptions.allowLines). */
  allowLines?: { mode: 'all' } | { mode: 'summary' | 'sampled'; intervalMs: number };
  /** Structured warnings (the journal). */
  warn: (obj: Record<string, unknown>) => void;
  /** Stay awake this long after an event of a burst, yielding, before sleeping (default 20; see native/watcher/fanotify_loop.cc). */
  spinUs?: number;
  nice?: number;
  watchdogMs?: number;
  identity?: 'pidfd-cache' | 'report-pidfd' | 'proc';
  /** Measurement only (bench/fanotify): see NativeWatcher's linkCheck and readBatch. */
  linkCheck?: boolean;
  readBatch?: boolean;
  metrics?: boolean;
  /** Pending allow records beyond this are counted, not written (denies always are). */
  queueAllows?: number;
  /** How often queued records are drained when the loop has not woken JavaScript (default 100 ms). */
  drainMs?: number;
  /** Events from outside the PID namespace: one decision-log line per surface per this many ms at most (default 60 s). */
  foreignLogMs?: number;
  /** How often new filesystems under a root are looked for. */
  rescanMs?: number;
  /**
   * How often subject processes in mount and user namespaces of their own are looked for (default 200 ms;
   * 0 = never: namespaces.ts). Mount notifications, where the kernel has them, re-read a namespace found at once.
   */
  nsScanMs?: number;
  readMountinfo?: () => string;
  /** Be the standby of another watcher process (see NativeWatcher's standbyOf). */
  standbyOf?: { pid: number; groupFd: number; tableFd: number };
  /** A standby took the group over: it is the active watcher now. */
  onTakeover?: () => void;
  /**
   * Hold the events an ask entry covers (native/watcher/hold.h) and hand each to `onAsk`; answer it with
   * `answer`. Absent: an ask is denied at once (approval_unavailable).
   */
  hold?: NonNullable<WatcherOptions['hold']>;
  onAsk?: (ask: HeldAsk) => void;
}

export interface WatcherCore {
  /** Loads the starting map, starts the loop, then puts the marks on. */
  init(subjects: WatcherSubject[], watch: string[]): void;
  /** Replaces one subject's entry (a subject is never removed: null policy denies). */
  set(subject: WatcherSubject): void;
  /**
   * Replaces many subjects' entries at once: one native map swap and one mark scan, where `set` one after another
   * rebuilt the whole map and rescanned every root for each (at 1,000 subjects, 37 s of a start).
   */
  setMany(list: WatcherSubject[]): void;
  /** Replaces the extra watched paths (config `filesystem.watch`) and marks what they add: a service adopting this watcher. */
  setWatch(paths: string[]): void;
  /** Answers a held event; false when it is no longer held (the loop denied it at its deadline, or closed). */
  answer(id: number, allow: boolean): boolean;
  status(): WatcherStatus;
  close(): void;
}

function errnoCode(e: unknown): string {
  return (e as { code?: string }).code ?? 'EUNKNOWN';
}

/** The filesystem marks of one watcher: each filesystem marked once (by st_dev), a failure warned once per path. */
function createMarks(
  w: NativeWatcher,
  warn: WatcherCoreOptions['warn'],
  readMountinfo: () => string,
): { marked: Map<number, string>; errors: Map<string, string>; rescan(roots: Set<string>): void } {
  const marked = new Map<number, string>(); // st_dev -> the path the mark was put on
  const errors = new Map<string, string>();
  const tryMark = (p: string): void => {
    let dev: number;
    try {
      dev = fs.statSync(p).dev;
    } catch {
      return;
    }
    if (marked.has(dev)) return;
    try {
      w.mark(p, 'filesystem');
      marked.set(dev, p);
      errors.delete(p);
    } catch (e) {
      if (!errors.has(p)) warn({ msg: 'cannot mark filesystem', path: p, code: errnoCode(e) });
      errors.set(p, errnoCode(e));
    }
  };
  /** Marks every root's filesystem (its nearest existing ancestor) and every mount beneath a root. */
  const rescan = (roots: Set<string>): void => {
    for (const r of roots) {
      let p = r;
      while (p !== '/' && !fs.existsSync(p)) p = path.dirname(p);
      tryMark(p);
    }
    let mounts;
    try {
      mounts = parseMountinfo(readMountinfo());
    } catch {
      return;
    }
    for (const m of mounts) {
      for (const r of roots) {
        if (r !== '/' && (m.mountPoint === r || m.mountPoint.startsWith(r + '/'))) tryMark(m.mountPoint);
      }
    }
  };
  return { marked, errors, rescan };
}

/** Creates the watcher core around one native Watcher (one fanotify group). */
export function createWatcherCore(opts: WatcherCoreOptions): WatcherCore {
  const subjects = new Map<number, WatcherSubject>();
  let watch: string[] = [];
  let droppedAllows = 0;
  let timers: NodeJS.Timeout[] = [];
  const readMountinfo = opts.readMountinfo ?? (() => fs.readFileSync('/proc/self/mountinfo', 'utf8'));
  const pidNs = pidNsOf();
  const foreign = createForeignPidLog({
    intervalMs: opts.foreignLogMs ?? 60_000,
    write: (text) => opts.log.writeLines(Buffer.from(text, 'utf8')),
    warn: opts.warn,
  });

  let standby = false;
  /** Once, after a takeover: the dead watcher's pending events this one answered, to the log. */
  const tookOver = (): void => {
    standby = false;
    opts.onTakeover?.();
    const recs = w.takeoverRecords();
    const st = w.stats();
    for (const r of recs) {
      // A subject's event the dead watcher never answered: denied unjudged (its file is not known).
      if (r.recorded)
        opts.log.write?.({
          uid: r.uid,
          surface: r.exec ? 'commands' : 'filesystem',
          action: r.allow ? 'allow' : 'block',
          reason: 'watcher_takeover',
          subject: { pid: r.pid },
          rule: null,
        });
    }
    opts.warn({
      msg: 'took over from the watcher that died: its unanswered events are answered',
      allowed: st.takeoverAllowed,
      denied: st.takeoverDenied,
      unrecorded: st.takeoverUnrecorded,
      fromArea: st.takeoverFromArea,
      hi: st.takeoverHi,
      fenceErrno: st.takeoverFenceErrno,
      noCreds: st.takeoverNoCreds,
      drained: st.takeoverDrained,
      drainErrno: st.takeoverDrainErrno,
      unknownProcess: st.unknownProcess,
    });
  };

  const drain = (): void => {
    if (standby && !w.standby) tookOver();
    const { lines, droppedAllows: dropped, asks, allows, foreignPid } = w.drain();
    if (lines.length > 0) opts.log.writeLines(lines);
    foreign.update(foreignPid);
    if (allows)
      for (let i = 0; i + 3 < allows.length; i += 4)
        opts.log.countAllows?.(allows[i]!, allows[i + 1] ? 'commands' : 'filesystem', allows[i + 2]!, allows[i + 3]!);
    for (const a of asks) {
      // No one to ask (a hold without onAsk is a caller's mistake): denied now, never left to its deadline.
      if (opts.onAsk) opts.onAsk(a);
      else w.answer(a.id, false);
    }
    if (dropped > 0) {
      droppedAllows += dropped;
      opts.warn({ msg: 'allow records counted instead of written (log pressure)', count: dropped });
    }
  };

  const w: NativeWatcher = new opts.native.Watcher({
    onRecords: drain,
    watchdogMs: opts.watchdogMs ?? 10_000,
    spinUs: opts.spinUs ?? 20,
    nice: opts.nice ?? 0,
    identity: opts.identity ?? 'pidfd-cache',
    queueAllows: opts.queueAllows ?? 4096,
    ...(opts.allowLines && opts.allowLines.mode !== 'all'
      ? { allowLines: opts.allowLines.mode, sampleMs: opts.allowLines.intervalMs }
      : {}),
    ...(opts.linkCheck === false ? { linkCheck: false } : {}),
    ...(opts.readBatch ? { readBatch: true } : {}),
    ...(opts.metrics === false ? { metrics: false } : {}),
    ...(opts.standbyOf ? { standbyOf: opts.standbyOf } : {}),
    ...(opts.hold ? { hold: opts.hold } : {}),
  });
  standby = w.standby;

  const apply = (): void => {
    w.setSubjects([...subjects.values()]);
  };
  const setMany = (list: WatcherSubject[]): void => {
    const next = new Map(subjects);
    for (const s of list) next.set(s.uid, s);
    // The native swap is all or nothing: a refused map leaves the old one in force, here as in the loop.
    w.setSubjects([...next.values()]);
    for (const s of list) subjects.set(s.uid, s);
    rescan();
  };
  let ns: NamespaceScanner | null = null;

  const marks = createMarks(w, opts.warn, readMountinfo);
  /** Marks the filesystem of every root (its nearest existing ancestor) and every mount beneath a root. */
  const rescan = (): void => {
    const roots = new Set<string>(watch.map((p) => path.resolve(p)));
    for (const s of subjects.values()) for (const r of policyRoots(s.policy)) roots.add(r);
    marks.rescan(roots);
  };

  // A standby marks nothing (its marks would be the group's twice); after its takeover it scans like the active one.
  const newScanner = () =>
    createNamespaceScanner({
      native: opts.native,
      watcher: w,
      subjects: () => subjects,
      log: opts.log,
      warn: opts.warn,
    });
  const nsTick = (): void => {
    if (w.standby) return;
    ns ??= newScanner();
    ns.scan();
  };

  return {
    init(list, watchPaths) {
      for (const s of list) subjects.set(s.uid, s);
      watch = [...watchPaths];
      apply();
      // The loop answers before the first mark exists, so no event ever waits for a thread.
      w.start();
      rescan();
      const nsMs = opts.nsScanMs ?? 200;
      if (!standby && nsMs > 0) {
        ns = newScanner();
        ns.scan();
      }
      // The loop coalesces its wake-ups (a deny or a full batch at once, else at most one per 20 ms), so allows
      // queued just after a wake wait for this timer rather than for the next deny.
      timers = [
        setInterval(rescan, opts.rescanMs ?? 3000),
        setInterval(() => w.heartbeat(), 1000),
        setInterval(drain, opts.drainMs ?? 100),
        ...(nsMs > 0 ? [setInterval(nsTick, nsMs)] : []),
      ];
      w.heartbeat();
    },
    set: (s) => setMany([s]),
    setMany,
    setWatch(paths) {
      watch = [...paths];
      rescan();
    },
    answer: (id, allow) => w.answer(id, allow),
    status() {
      return {
        pid: process.pid,
        role: w.standby ? 'standby' : 'active',
        groupFd: w.fd,
        tableFd: w.tableFd,
        marks: [...marks.marked.values()].sort(),
        markErrors: [...marks.errors].map(([p, code]) => ({ path: p, code })),
        subjects: subjects.size,
        droppedAllows,
        pidNs,
        ...(ns ? { namespaces: ns.status() } : {}),
        stats: w.stats(),
      };
    },
    close() {
      for (const t of timers) clearInterval(t);
      timers = [];
      ns?.close();
      // Closing answers what is held (native/watcher/hold.h: approval_cancelled); the drain after it writes those lines.
      w.close();
      drain();
      foreign.flush();
    },
  };
}
