import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { InspectFinding, Surface } from '../engine/types.js';
import { maskInputs } from '../engine/index.js';
import { jsonString, jsonText } from './json-text.js';

/** What an enforcer hands the log for one decision. */
export interface DecisionRecord {
  uid: number;
  surface: Surface;
  /**
   * `ask`: the action is held and a human asked; the outcome follows as its own line (docs/approvals.md).
   * `would_block`: shadow mode let through what would have been blocked (reason and rule the block's).
   */
  action: 'allow' | 'block' | 'ask' | 'would_block';
  reason: string;
  subject: unknown;
  /** The entry that decided, or null for a mode default / failure. */
  rule?: string | null;
  severity?: 'critical';
  /** Tool inspection findings (already masked by the engine). */
  findings?: InspectFinding[];
  /**
   * An asked action: the request's ID on the `ask` line and on its outcome's line, with who decided
   * and how (src/engine/approval.ts).
   */
  approval?: {
    request: string | null;
    how?: string;
    by?: { uid: number; account: string | null };
    deadline?: string;
  };
}

/** One line of the decision log, in this key order. */
export interface DecisionLine extends DecisionRecord {
  ts: string;
  ref: string;
}

/**
 * The decision log as an enforcer writes to it (the proxy, the gate, the tools socket, the
 * terminal): the one declaration; `DecisionLog` below is the whole object the service holds.
 */
export interface DecisionWriter {
  /** Writes one line and returns its ref (the short id that ties a block back to its line). */
  write(rec: DecisionRecord): string;
  /** Writes the line of a record whose formatDecisionTail is `tail` (see DecisionLog.writeTail). */
  writeTail?(action: DecisionRecord['action'], tail: string): string;
  /** Writes lines the log holds back (see createDecisionLog's coalesceAllows). */
  flush?(): void;
  /**
   * Where native code in this process may write plain allow lines itself (the proxy's native verdict path): the
   * log's descriptor (O_APPEND), and whether each line is written (`write`: logging.allows all) or only counted.
   * null when it may not: stdout, sampled allows, lines held back (coalesceAllows), a journal that samples allows.
   */
  allowSink?(): { fd: number; write: boolean } | null;
  /** Calls `fn` with the new descriptor after each reopen, before the old one closes; returns its removal. */
  onReopen?(fn: (fd: number) => void): () => void;
  /**
   * Plain allows that native code decided and wrote (`written` of them) through allowSink: counted as this log
   * counts its own (the allow tally, and in wrappers the metrics and the journal's skipped allows).
   */
  allowsElsewhere?(uid: number, surface: Surface, reason: string, allowed: number, written: number): void;
}

/**
 * Plain allow lines (config logging.allows): `all` writes each; `summary` counts them and writes one
 * `allow_summary` line per subject and surface every `intervalMs`; `sampled` also writes the first of
 * each period whole. Blocks, asks, would_blocks and an approval's outcome are always written.
 */
export type AllowLines = { mode: 'all' } | { mode: 'summary' | 'sampled'; intervalMs: number };

/** A config's logging.allows and logging.allow_summary_seconds as createDecisionLog takes them. */
export function allowLinesOf(c: { logging: { allows: string; allow_summary_seconds: number } }): AllowLines {
  const mode = c.logging.allows;
  return mode === 'summary' || mode === 'sampled'
    ? { mode, intervalMs: c.logging.allow_summary_seconds * 1000 }
    : { mode: 'all' };
}

export interface DecisionLog extends DecisionWriter {
  /**
   * Writes the line whose part after the ref is `tail` (formatDecisionTail of a record whose
   * action is `action`): the same line `write` would write for that record. Returns the ref.
   */
  writeTail(action: DecisionRecord['action'], tail: string): string;
  /**
   * Writes whole lines formatted elsewhere (the watcher's native loop formats them exactly as
   * formatDecision does), after any held allow lines, in one write(2).
   */
  writeLines(lines: Buffer): void;
  /**
   * Adds allows decided and formatted elsewhere (the watcher's native loop counts them instead of
   * formatting lines it will not write) to the next allow_summary line: `allowed` in all, `written`
   * of them written whole. A no-op when every allow line is written.
   */
  countAllows(uid: number, surface: Surface, allowed: number, written: number): void;
  /** Writes any allow lines held back by `coalesceAllows` now (a no-op otherwise). */
  flush?(): void;
  /**
   * Opens the sink's path again and writes every later line there (after a rename-style
   * rotation: the old descriptor still points at the renamed file). Lines written before
   * return went to the old file, lines after go to the new one: none lost, none twice.
   * Throws (keeping the old descriptor) when the path cannot be opened. A no-op for stdout.
   */
  reopen(): void;
  close(): Promise<void>;
}

const B32 = 'abcdefghijklmnopqrstuvwxyz234567';
const B32_CODES = Uint8Array.from(B32, (ch) => ch.charCodeAt(0));
const REF_CODES = new Uint8Array(8);

/** 8 base32 characters from 40 random bits: short enough to read out, unique enough per log. */
// Random bytes are drawn 4 KiB at a time: one getrandom per line cost more than the rest of a decision.
let pool = Buffer.alloc(0);
let poolAt = 0;

export function newRef(): string {
  if (poolAt + 5 > pool.length) {
    pool = crypto.randomBytes(4096);
    poolAt = 0;
  }
  // 40 random bits -> 8 base32 characters.
  let hi = pool[poolAt]!;
  let lo = ((pool[poolAt + 1]! << 24) | (pool[poolAt + 2]! << 16) | (pool[poolAt + 3]! << 8) | pool[poolAt + 4]!) >>> 0;
  poolAt += 5;
  // Built from 8 character codes at once (a string concatenation per character showed in profiles).
  const c = REF_CODES;
  for (let i = 7; i >= 0; i--) {
    c[i] = B32_CODES[lo & 31]!;
    lo = ((lo >>> 5) | ((hi & 31) << 27)) >>> 0;
    hi >>>= 5;
  }
  return String.fromCharCode(c[0]!, c[1]!, c[2]!, c[3]!, c[4]!, c[5]!, c[6]!, c[7]!);
}

/** Masks secrets and PII in a tool subject's inputs; other subjects are written as they are. */
function safeSubject(surface: Surface, subject: unknown): unknown {
  if (surface !== 'tools' || subject === null || typeof subject !== 'object') return subject;
  const s = subject as { name?: unknown; inputs?: unknown };
  return 'inputs' in s ? { ...s, inputs: maskInputs(s.inputs) } : s;
}

// The ISO timestamp of the current millisecond, formatted once: a busy gate logs many lines per ms.
// So is the line's start up to its ref: an ISO time and a ref (base32) need no escaping.
let lastMs = -1;
let lastIso = '';
let lastHead = '';
function isoNow(): string {
  const ms = Date.now();
  if (ms !== lastMs) {
    lastMs = ms;
    lastIso = new Date(ms).toISOString();
    lastHead = `{"ts":"${lastIso}","ref":"`;
  }
  return lastIso;
}

/** decisionHead(ref) for a ref of newRef, without escaping what needs none. */
function headOf(ref: string): string {
  isoNow();
  return `${lastHead}${ref}"`;
}

const ASCII = /^[\x00-\x7f]*$/;

/** `,"key":value` as JSON.stringify writes a member (nothing for a value it omits). */
function member(key: string, v: unknown): string {
  const t = jsonText(v);
  return t === undefined ? '' : `,"${key}":${t}`;
}

/**
 * Formats one decision as its JSON line (with the newline): exactly JSON.stringify of its
 * DecisionLine (this key order), built directly because this runs once per decision.
 */
export function formatDecision(rec: DecisionRecord, ref = newRef(), now?: Date): string {
  return decisionHead(ref, now) + formatDecisionTail(rec);
}

/**
 * A decision line with no `uid`: the watcher's count of events from processes it cannot identify
 * (foreign_pid_namespace, src/dataplane/watcher/pidns.ts). Written whole, never through the allow tally.
 */
export function formatUnattributed(rec: Omit<DecisionRecord, 'uid'>): string {
  return decisionHead(newRef()) + formatDecisionTail(rec as DecisionRecord);
}

/** The start of a decision line: `{"ts":…,"ref":…`. */
function decisionHead(ref: string, now?: Date): string {
  return `{"ts":${jsonString(now === undefined ? isoNow() : now.toISOString())},"ref":${jsonString(ref)}`;
}

/**
 * Everything of a decision's line after its ref, newline included. It depends only on the record,
 * so a writer that logs the same decision again and again may keep it (see DecisionLog.writeTail).
 */
export function formatDecisionTail(rec: DecisionRecord): string {
  return (
    member('uid', rec.uid) +
    member('surface', rec.surface) +
    member('action', rec.action) +
    member('reason', rec.reason) +
    member('subject', safeSubject(rec.surface, rec.subject)) +
    member('rule', rec.rule) +
    member('severity', rec.severity) +
    member('findings', rec.findings) +
    member('approval', rec.approval) +
    '}\n'
  );
}

/** write(2) until every byte of `buf` is out. */
function writeFully(fd: number, buf: Buffer): void {
  let off = 0;
  while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off);
}

/** Opens a decision file for appending: 0600 in a 0750 directory. */
function openSink(sink: string): { fd: number; st: fs.Stats } {
  // Stated, not left to the umask (the unit runs with UMask=0077): 0750 whatever the process umask is.
  if (fs.mkdirSync(path.dirname(sink), { recursive: true, mode: 0o750 }) !== undefined) {
    fs.chmodSync(path.dirname(sink), 0o750);
  }
  const fd = fs.openSync(sink, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o600);
  try {
    // An existing file keeps the mode it was created with; re-state 0600 when it is ours to change.
    // Only a regular file: a sink such as /dev/null or a FIFO is the operator's, and chmod-ing
    // /dev/null as root would break every other user of it.
    const st = fs.fstatSync(fd);
    if (st.isFile() && st.uid === process.getuid?.()) fs.fchmodSync(fd, 0o600);
    return { fd, st };
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
}

interface AllowCount {
  uid: number;
  surface: Surface;
  allowed: number;
  written: number;
  since: string;
}

/** The allow counts behind the allow_summary lines of one writer (see AllowLines). */
function createAllowTally(mode: AllowLines) {
  const counts = new Map<string, AllowCount>();
  const entry = (uid: number, surface: Surface): AllowCount => {
    const k = `${uid}/${surface}`;
    let c = counts.get(k);
    if (c === undefined) {
      c = { uid, surface, allowed: 0, written: 0, since: isoNow() };
      counts.set(k, c);
    }
    return c;
  };
  return {
    /** Counts one plain allow; true when its line is to be written (the period's first, when sampled). */
    take(uid: number, surface: Surface): boolean {
      if (mode.mode === 'all') return true;
      const c = entry(uid, surface);
      c.allowed++;
      if (mode.mode === 'sampled' && c.written === 0) {
        c.written = 1;
        return true;
      }
      return false;
    },
    add(uid: number, surface: Surface, allowed: number, written: number): void {
      if (mode.mode === 'all' || allowed === 0) return;
      const c = entry(uid, surface);
      c.allowed += allowed;
      c.written += written;
    },
    /** The summary lines of the period now ending (and a new period begun), '' when nothing was allowed. */
    drain(): string {
      let text = '';
      for (const c of counts.values()) {
        text += formatDecision({
          uid: c.uid,
          surface: c.surface,
          action: 'allow',
          reason: 'allow_summary',
          subject: { allowed: c.allowed, written: c.written, since: c.since },
          rule: null,
        });
      }
      counts.clear();
      return text;
    },
  };
}

/** `,"uid":N,"surface":"S"` at the start of a formatDecisionTail: read back without parsing the line. */
const TAIL_HEAD = /^,"uid":(\d+),"surface":"([a-z]+)"/;

/**
 * Opens the decision sink: `stdout` (the journal) or an absolute file path.
 *
 * Each line is one synchronous write(2) to a descriptor opened O_APPEND, not a buffered stream:
 * a decision the enforcer has acted on is in the kernel before `write` returns, so a crash of the
 * service loses no line, and concurrent writers (service, watcher) never interleave within a line.
 * The file is 0600 (decisions name what an agent tried to reach) in a 0750 directory.
 * stdout is synchronous for files and pipes on Linux, so it gives the same guarantee.
 * `reopen` (SIGHUP) follows a rename-style rotation.
 *
 * `coalesceAllows` (the MCP gate, where a write(2) per allowed call was a fifth of its CPU) holds
 * `allow` lines back until the end of the current event-loop turn (or the next `block` line, or
 * `flush`/`close`, or process exit) and writes them together in one write(2). `block` lines stay
 * synchronous: a block is in the kernel, after every earlier line, before `write` returns. What a
 * crash can lose is the allow lines of the turn it happened in.
 */
export function createDecisionLog(opts: { sink: string; coalesceAllows?: boolean; allows?: AllowLines }): DecisionLog {
  const allows = opts.allows ?? { mode: 'all' };
  const tally = createAllowTally(allows);
  /** Whether this record's line is written: false for a plain allow the tally counts instead. */
  const keepRec = (rec: DecisionRecord) =>
    rec.action !== 'allow' || rec.approval !== undefined || tally.take(rec.uid, rec.surface);
  const keepTail = (action: DecisionRecord['action'], tail: string) => {
    if (action !== 'allow' || allows.mode === 'all' || tail.includes(',"approval":')) return true;
    const m = TAIL_HEAD.exec(tail);
    return m === null || tally.take(Number(m[1]), m[2] as Surface);
  };
  if (opts.sink === 'stdout') {
    const out = (text: string) => text !== '' && process.stdout.write(text);
    const timer = allows.mode === 'all' ? null : setInterval(() => out(tally.drain()), allows.intervalMs);
    timer?.unref();
    const onExit = () => out(tally.drain());
    if (timer) process.on('exit', onExit);
    return {
      write(rec) {
        const ref = newRef();
        if (keepRec(rec)) process.stdout.write(formatDecision(rec, ref));
        return ref;
      },
      writeTail(action, tail) {
        const ref = newRef();
        if (keepTail(action, tail)) process.stdout.write(decisionHead(ref) + tail);
        return ref;
      },
      writeLines(lines) {
        writeFully(1, lines);
      },
      countAllows: tally.add,
      flush() {},
      reopen() {},
      close: async () => {
        if (timer) clearInterval(timer);
        process.off('exit', onExit);
        out(tally.drain());
      },
    };
  }
  if (!path.isAbsolute(opts.sink)) throw new Error(`decision sink must be stdout or an absolute path: ${opts.sink}`);
  const sink = opts.sink;
  let { fd, st } = openSink(sink);
  let open = true;
  const reopened = new Set<(fd: number) => void>();
  // Allow lines held back (coalesceAllows), written at the end of the event-loop turn. Kept as a
  // list and joined once: one long chain of concatenations cost more to flatten than the join.
  // Held text known to be ASCII is encoded as latin1 (the same bytes; a third of UTF-8's cost).
  let held: string[] = [];
  let heldAscii = true;
  let flushQueued = false;
  // The last tail written and whether it is ASCII: a gate writes the same tail again and again.
  let lastTail = '';
  let lastTailAscii = true;
  const writeHeld = () => {
    const text = held.join('');
    const enc = heldAscii ? 'latin1' : 'utf8';
    held = [];
    heldAscii = true;
    writeFully(fd, Buffer.from(text, enc));
  };
  const flush = () => {
    flushQueued = false;
    if (held.length === 0 || !open) return;
    writeHeld();
  };
  const summarize = () => {
    const text = tally.drain();
    if (text === '' || !open) return;
    held.push(text);
    heldAscii = false;
    flush();
  };
  const timer = allows.mode === 'all' ? null : setInterval(summarize, allows.intervalMs);
  timer?.unref();
  const onExit = () => (timer ? summarize() : flush());
  if (opts.coalesceAllows || timer) process.on('exit', onExit);
  const put = (action: DecisionRecord['action'], line: string, ascii: boolean): void => {
    held.push(line);
    if (!ascii) heldAscii = false;
    if (opts.coalesceAllows && action === 'allow') {
      if (!flushQueued) {
        flushQueued = true;
        setImmediate(flush);
      }
      return;
    }
    // Held allow lines go first, in the same write: the file keeps decision order.
    writeHeld();
  };
  return {
    write(rec) {
      const keep = keepRec(rec);
      if (!open) throw new Error('decision log is closed');
      const ref = newRef();
      // A plain allow counted, not written, is never formatted.
      if (keep) put(rec.action, formatDecision(rec, ref), false);
      return ref;
    },
    writeTail(action, tail) {
      const keep = keepTail(action, tail);
      if (!open) throw new Error('decision log is closed');
      const ref = newRef();
      if (!keep) return ref;
      if (tail !== lastTail) {
        lastTail = tail;
        lastTailAscii = ASCII.test(tail);
      }
      put(action, headOf(ref) + tail, lastTailAscii);
      return ref;
    },
    countAllows: tally.add,
    allowSink: () =>
      !open || opts.coalesceAllows || allows.mode === 'sampled' ? null : { fd, write: allows.mode === 'all' },
    onReopen(fn) {
      reopened.add(fn);
      return () => void reopened.delete(fn);
    },
    allowsElsewhere(uid, surface, _reason, allowed, written) {
      tally.add(uid, surface, allowed, written);
    },
    writeLines(lines) {
      if (!open) throw new Error('decision log is closed');
      flush(); // held allow lines first: the file keeps decision order
      writeFully(fd, lines);
    },
    flush,
    reopen() {
      if (!open) throw new Error('decision log is closed');
      // Opened before anything moves: a failure keeps every line going to the old file.
      const next = openSink(sink);
      flush(); // held allow lines belong to the file they were decided under
      const old = { fd, st };
      ({ fd, st } = next);
      // A writer that fails to follow keeps the old descriptor of its own: its lines go to the renamed file.
      for (const fn of reopened) {
        try {
          fn(fd);
        } catch {
          /* see above */
        }
      }
      if (old.st.isFile()) fs.fsyncSync(old.fd);
      fs.closeSync(old.fd);
    },
    async close() {
      if (!open) return;
      if (timer) clearInterval(timer);
      summarize();
      flush();
      open = false;
      process.off('exit', onExit);
      if (st.isFile()) fs.fsyncSync(fd); // a FIFO or a device has nothing to sync (EINVAL)
      fs.closeSync(fd);
    },
  };
}
