// The watcher process: `node watcher-main.js --decisions <sink>`, spawned by the
// service (supervisor.ts) with the map protocol on fd 3. It and its standby (a second
// watcher process, `--standby-of PID`) are the only holders of the fanotify group. Everything it will ever need is imported here, before any mark goes
// on: once marks exist, loading a module would open files on a marked filesystem.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createDecisionLog, type AllowLines } from '../../log/decisions.js';
import { createJournal, operationalFields, teeDecisionsToJournal } from '../../log/journal.js';
import { nativeCommon, nativeWatcher } from '../../native.js';
import { approvalOf } from '../../engine/approval.js';
import type { HeldAsk } from './addon.js';
import { buildOf } from './adopt.js';
import { EXIT_ACTIVE_GONE, lineReader, type FromWatcher, type ToWatcher, type WatcherEvent } from './protocol.js';
import { createWatcherCore } from './watcher.js';

const { values } = parseArgs({
  options: {
    decisions: { type: 'string', default: 'stdout' },
    'spin-us': { type: 'string' }, // default: createWatcherCore's
    nice: { type: 'string', default: '0' },
    'watchdog-ms': { type: 'string', default: '10000' },
    'rescan-ms': { type: 'string', default: '3000' },
    'ns-scan-ms': { type: 'string', default: '200' },
    identity: { type: 'string', default: 'pidfd-cache' },
    'queue-allows': { type: 'string', default: '4096' },
    // config logging.allows and logging.allow_summary_seconds (ms): plain allows as lines, counted or sampled.
    allows: { type: 'string', default: 'all' },
    'allow-summary-ms': { type: 'string', default: '60000' },
    // Events from outside the PID namespace: at most one decision-log line per surface per this many ms (pidns.ts).
    'foreign-log-ms': { type: 'string', default: '60000' },
    // Measurement only (bench/fanotify): 'off' skips the hard-link check; 'batch' reads many events per read(2).
    'link-check': { type: 'string', default: 'on' },
    // Measurement only (bench/fanotify): off skips the judge-time histogram's clock reads.
    metrics: { type: 'string', default: 'on' },
    read: { type: 'string', default: 'one' },
    // A standby: takes the group and the in-flight table from this active watcher (pidfd_getfd) and
    // reads nothing until that process is gone (supervisor.ts).
    'standby-of': { type: 'string' },
    'group-fd': { type: 'string' },
    'table-fd': { type: 'string' },
    // Where this watcher waits for the next service when its own goes without releasing it (a crash, a restart,
    // an upgrade): it keeps judging with its last map and listens here for a start to adopt it (adopt.ts).
    // Absent: the service's end is the watcher's (the old way, and tests that run a watcher alone).
    'adopt-socket': { type: 'string' },
    // An orphan waits at most this long for a service, then releases the host (0: until adopted or released).
    'orphan-max-ms': { type: 'string', default: '0' },
    // The journal's socket (the service found it: config logging.journal) and logging.journal_allows.
    journal: { type: 'string' },
    'journal-allows': { type: 'string', default: '0' },
    // Holding asked events for the service's approvals queue (native/watcher/hold.h): the bounds and the deadlines
    // (ms) of config approvals. Absent: an ask entry is answered as a block at once (approval_unavailable).
    'hold-max': { type: 'string' },
    'hold-per-subject': { type: 'string', default: '200' },
    'hold-filesystem-ms': { type: 'string', default: '10000' },
    'hold-commands-ms': { type: 'string', default: '10000' },
  },
});

/**
 * The loop's own deadline is the queue's plus this: normally the queue's timeout answers first (its line
 * names the request); the loop's is the backstop when that answer never comes (the service is wedged).
 */
const HOLD_GRACE_MS = 1000;

// What ps shows, with the role (a standby renames itself when it takes over); set before anything else runs.
process.title = values['standby-of'] !== undefined ? 'leash-watcher-standby' : 'leash-watcher';

const native = nativeWatcher();
const journal =
  values.journal === undefined
    ? null
    : createJournal({
        socket: values.journal,
        send: (p, e) => nativeCommon().journalSend(p, e),
        allowSample: Number(values['journal-allows']),
        identifier: 'leash-watcher',
      });

function warn(obj: Record<string, unknown>): void {
  const line = `${JSON.stringify({ component: 'watcher', pid: process.pid, ...obj })}\n`;
  if (journal === null || !journal.send(operationalFields(line))) process.stderr.write(line);
}

/**
 * A standby spawned for an active watcher that has exited since (another standby took over, or the active was
 * killed) cannot take the group from it: it says so in one line and ends, and the service spawns the next for the
 * current active. Anything else is thrown as it is.
 */
function standbyGuard<T>(make: () => T): T {
  try {
    return make();
  } catch (e) {
    if (values['standby-of'] === undefined || (e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
    warn({ msg: 'the active watcher exited before this standby took its group', active: Number(values['standby-of']) });
    process.exit(EXIT_ACTIVE_GONE);
  }
}

/** Blocks the JavaScript thread for good (test hook): the native loop must keep answering. */
function wedgeForTest(): void {
  // Atomics.wait sleeps without CPU and still runs V8 interrupts, so the watchdog can print this stack.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}

// The decision log is opened (its descriptor held) before the marks go on. The native loop
// formats each decision as its log line (native/watcher/decisionline.cc, byte for byte formatDecision's);
// a drain's lines go out as one write(2) of whole lines (O_APPEND: never interleaved with other
// writers).
const allowLines: AllowLines =
  values.allows === 'summary' || values.allows === 'sampled'
    ? { mode: values.allows, intervalMs: Number(values['allow-summary-ms']) }
    : { mode: 'all' };
const file = createDecisionLog({ sink: values.decisions!, allows: allowLines });
const log = journal === null ? file : teeDecisionsToJournal(file, journal, 'watcher');
const core = standbyGuard(() =>
  createWatcherCore({
    native,
    log,
    warn,
    ...(values['spin-us'] !== undefined ? { spinUs: Number(values['spin-us']) } : {}),
    nice: Number(values.nice),
    watchdogMs: Number(values['watchdog-ms']),
    rescanMs: Number(values['rescan-ms']),
    foreignLogMs: Number(values['foreign-log-ms']),
    nsScanMs: Number(values['ns-scan-ms']),
    identity: values.identity as 'pidfd-cache' | 'report-pidfd' | 'proc',
    queueAllows: Number(values['queue-allows']),
    allowLines,
    linkCheck: values['link-check'] !== 'off',
    readBatch: values.read === 'batch',
    metrics: values.metrics !== 'off',
    ...(values['hold-max'] !== undefined
      ? {
          hold: {
            max: Number(values['hold-max']),
            perSubject: Number(values['hold-per-subject']),
            filesystemMs: Number(values['hold-filesystem-ms']) + HOLD_GRACE_MS,
            commandsMs: Number(values['hold-commands-ms']) + HOLD_GRACE_MS,
          },
          onAsk: (a: HeldAsk) => onAsk(a),
        }
      : {}),
    ...(values['standby-of'] !== undefined
      ? {
          onTakeover: () => {
            process.title = 'leash-watcher';
            send({ takeover: { pid: process.pid } });
          },
          standbyOf: {
            pid: Number(values['standby-of']),
            groupFd: Number(values['group-fd']),
            tableFd: Number(values['table-fd']),
          },
        }
      : {}),
  }),
);

// The channel to the service: fd 3 from the spawning service, or a connection to the adoption socket.
let chan: net.Socket | null = null;
const send = (m: FromWatcher | WatcherEvent): void => {
  // Orphaned: nobody to tell. A held event's ask goes unanswered and the loop's own deadline denies it.
  if (chan && !chan.destroyed) chan.write(`${JSON.stringify(m)}\n`);
};

/** /proc/PID/cmdline (procfs is never marked): the asking process is blocked in its open, so still there. */
function cmdlineOf(pid: number): string[] {
  try {
    const raw = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return raw.split('\0').filter((a, i, all) => a !== '' || i < all.length - 1);
  } catch {
    return [];
  }
}
const asked = new Map<number, HeldAsk>();
function onAsk(a: HeldAsk): void {
  asked.set(a.id, a);
  send({ ask: { ...a, cmdline: cmdlineOf(a.pid) } });
}
let initialised = false;

// This process's build (adopt.ts): a service of another build replaces this watcher rather than adopting it.
const build = buildOf(process.argv[1]!);
const statusNow = () => ({ ...core.status(), build });

function onMessage(m: ToWatcher): void {
  try {
    switch (m.op) {
      case 'init':
        if (initialised) throw new Error('already initialised');
        core.init(m.subjects, m.watch);
        initialised = true;
        send({ id: m.id, ok: true, status: statusNow() });
        break;
      case 'set':
        core.set(m.subject);
        send({ id: m.id, ok: true });
        break;
      case 'setMany':
        core.setMany(m.subjects);
        send({ id: m.id, ok: true });
        break;
      case 'reopen':
        log.reopen();
        send({ id: m.id, ok: true });
        break;
      case 'status':
        send({ id: m.id, ok: true, status: statusNow() });
        break;
      case 'adopt':
        if (!initialised) throw new Error('not initialised');
        core.setWatch(m.watch);
        core.setMany(m.subjects);
        warn({ msg: 'adopted by a new service: judging with its map', subjects: m.subjects.length });
        send({ id: m.id, ok: true, status: statusNow() });
        break;
      case 'release':
        released = true;
        shutdown(0);
        break;
      case 'answer': {
        const a = asked.get(m.hold);
        asked.delete(m.hold);
        const held = core.answer(m.hold, m.outcome.action === 'allow');
        // The outcome's line, when this answer is the one the kernel got (else the loop's deadline was).
        if (held && a)
          log.write({
            uid: a.uid,
            surface: a.surface,
            action: m.outcome.action,
            reason: m.outcome.reason,
            subject: a.surface === 'commands' ? { binary: a.subject } : { path: a.subject },
            rule: a.rule,
            approval: approvalOf(m.outcome),
          });
        send({ id: m.id, ok: true, held });
        break;
      }
      case 'wedge':
        if (process.env.LEASH_TEST_WEDGE_JS !== '1') throw new Error('wedge is a test hook');
        send({ id: m.id, ok: true });
        setTimeout(wedgeForTest, 50);
        break;
      case 'selfopen':
        if (process.env.LEASH_TEST_WEDGE_JS !== '1') throw new Error('selfopen is a test hook');
        send({
          id: m.id,
          ok: true,
          bytes: fs.readFileSync(m.path).length + fs.readdirSync(path.dirname(m.path)).length,
        });
        break;
      default:
        throw new Error(`unknown op ${(m as { op?: unknown }).op as string}`);
    }
  } catch (e) {
    send({ id: (m as { id: number }).id, ok: false, error: (e as Error).message });
  }
}

let released = false;
const shutdown = (code: number): void => {
  try {
    core.close();
  } finally {
    process.exit(code);
  }
};

/** Takes `sock` as the channel to the service; its end orphans this watcher (or ends it: serviceGone). */
function attach(sock: net.Socket): void {
  chan = sock;
  sock.on(
    'data',
    lineReader<ToWatcher>(onMessage, (line) => warn({ msg: 'bad control line', line: line.slice(0, 200) })),
  );
  const gone = () => {
    if (chan !== sock) return;
    chan = null;
    serviceGone();
  };
  sock.on('close', gone);
  sock.on('error', gone);
}

let server: net.Server | null = null;
let orphanTimer: NodeJS.Timeout | null = null;

/**
 * The service's end of the channel closed without a release: it crashed, or stopped for a restart or an upgrade.
 * An active watcher with an adoption socket keeps judging with its last map (the group, and so every mark, stays)
 * and waits there for the next start. A standby ends (the active holds the group); so does a watcher that never had
 * its map, or that runs without an adoption socket.
 */
function serviceGone(): void {
  const sockPath = values['adopt-socket'];
  if (released || !initialised || sockPath === undefined || core.status().role !== 'active') {
    shutdown(0);
    return;
  }
  warn({ msg: 'the service is gone: judging with the last map until a start adopts this watcher', socket: sockPath });
  const maxMs = Number(values['orphan-max-ms']);
  if (maxMs > 0)
    orphanTimer ??= setTimeout(() => {
      warn({ msg: 'no service adopted this watcher in time: releasing the host', waitedMs: maxMs });
      shutdown(0);
    }, maxMs);
  if (server) return;
  listen(sockPath);
  // systemd removes the runtime directory when the unit ends (a failed start's `failed`, where this watcher keeps
  // the last good policy): the socket is made again, so that the start after the fix still finds this watcher.
  keepSocket ??= setInterval(() => {
    const st = fs.statSync(sockPath, { throwIfNoEntry: false });
    if (server && listening && st?.ino !== socketIno) {
      server.close();
      server = null;
      listen(sockPath);
    }
  }, 1000);
}

let keepSocket: NodeJS.Timeout | null = null;
let listening = false;
let socketIno: number | undefined;

/** Listens on the adoption socket; the first connection is the next service's channel. */
function listen(sockPath: string): void {
  // A socket file left by an earlier orphan of this path is stale: that watcher is gone or was adopted.
  fs.rmSync(sockPath, { force: true });
  fs.mkdirSync(path.dirname(sockPath), { recursive: true, mode: 0o755 });
  const old = process.umask(0o077);
  listening = false;
  const srv = net.createServer((sock) => {
    if (chan) {
      sock.destroy();
      return;
    }
    if (orphanTimer) clearTimeout(orphanTimer);
    if (keepSocket) clearInterval(keepSocket);
    orphanTimer = keepSocket = null;
    srv.close();
    server = null;
    // The socket file goes with the listener: the next orphaning makes a new one.
    fs.rmSync(sockPath, { force: true });
    attach(sock);
  });
  server = srv;
  srv.on('error', (e) => {
    warn({ msg: 'cannot listen for the next service: releasing the host', code: (e as NodeJS.ErrnoException).code });
    shutdown(0);
  });
  srv.listen(sockPath, () => {
    process.umask(old);
    listening = true;
    socketIno = fs.statSync(sockPath, { throwIfNoEntry: false })?.ino;
  });
}

attach(new net.Socket({ fd: 3, readable: true, writable: true }));
process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
// The service asks over the channel (acknowledged); a SIGHUP sent to this process itself does the same.
process.on('SIGHUP', () => {
  try {
    log.reopen();
  } catch (e) {
    warn({
      msg: 'cannot reopen the decision log, still writing to the old file',
      code: (e as NodeJS.ErrnoException).code,
    });
  }
});
