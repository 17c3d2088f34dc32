/**
 * The journal as a view of Leash: operational lines and decisions sent with fields of their own
 * (`LEASH_UID`, `LEASH_SURFACE`, `LEASH_ACTION`, `LEASH_REASON`, `LEASH_REF`, `LEASH_COMPONENT`,
 * `PRIORITY`, a `MESSAGE` a person reads), in journald's native protocol (native/common/journal.cc sends
 * the datagram, or a sealed memfd for a large entry), so that
 * `journalctl -u leash LEASH_UID=1001 LEASH_ACTION=block` works.
 *
 * The JSONL decision log stays the record; the journal is the view. So blocks (and anything that
 * is not an allow) always go to the journal, allows only when `logging.journal_allows` samples
 * them (a watcher makes tens of thousands a second, and journald rate-limits a unit), and what is
 * left out or dropped is counted (`stats()`, the metrics).
 *
 * Where the journal is: `LEASH_JOURNAL_SOCKET` (a path; tests point it at a journald of their
 * own), else journald's socket when `$JOURNAL_STREAM` is set or the socket exists.
 */
import fs from 'node:fs';
import type { DecisionLog, DecisionRecord, DecisionWriter } from './decisions.js';

export const JOURNAL_SOCKET = '/run/systemd/journal/socket';

/** What sends one serialised entry: 0 or an errno (the addon's journalSend). */
export type JournalSendFn = (socket: string, entry: Buffer) => number;

export interface JournalStats {
  /** Entries journald accepted. */
  sent: number;
  /** Entries the kernel refused (journald not keeping up, gone): the errno's name and how many. */
  dropped: Record<string, number>;
  /** Allow decisions left out by `journal_allows`. */
  allowsSkipped: number;
}

export interface Journal {
  readonly socket: string;
  /** Sends one entry; returns false when it was dropped (counted). */
  send(fields: JournalFields): boolean;
  /** `0` = allows left out, `1` = every allow, `n` = one allow in n. */
  readonly allowSample: number;
  /** True when this allow decision is one to send (and counts it as skipped otherwise). */
  sampleAllow(): boolean;
  stats(): JournalStats;
}

/** Field name -> value, in order. Names: A-Z, 0-9, _ and not starting with _ (journald's rule). */
export type JournalFields = Array<[string, string]>;

const NAME = /^[A-Z0-9][A-Z0-9_]{0,63}$/;
const ERRNO: Record<number, string> = {
  11: 'EAGAIN',
  111: 'ECONNREFUSED',
  2: 'ENOENT',
  105: 'ENOBUFS',
  90: 'EMSGSIZE',
};

/**
 * The native protocol's serialisation: `NAME=value\n`, or for a value holding a newline
 * `NAME\n` + its length as a little-endian 64-bit integer + the bytes + `\n`.
 */
export function serializeEntry(fields: JournalFields): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of fields) {
    if (!NAME.test(name)) throw new Error(`journal field name ${JSON.stringify(name)} is not valid`);
    if (!value.includes('\n')) {
      parts.push(Buffer.from(`${name}=${value}\n`, 'utf8'));
      continue;
    }
    const bytes = Buffer.from(value, 'utf8');
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(bytes.length));
    parts.push(Buffer.from(`${name}\n`, 'utf8'), len, bytes, Buffer.from('\n'));
  }
  return Buffer.concat(parts);
}

/** The journal's socket for this process, or null (stderr, as without a journal). */
export function findJournalSocket(
  setting: 'auto' | 'on' | 'off',
  env: NodeJS.ProcessEnv = process.env,
  exists: (p: string) => boolean = fs.existsSync,
): string | null {
  if (setting === 'off') return null;
  const explicit = env.LEASH_JOURNAL_SOCKET;
  if (explicit !== undefined && explicit !== '') return explicit;
  if (setting === 'on') return JOURNAL_SOCKET;
  return env.JOURNAL_STREAM !== undefined || exists(JOURNAL_SOCKET) ? JOURNAL_SOCKET : null;
}

export function createJournal(opts: {
  socket: string;
  send: JournalSendFn;
  /** `logging.journal_allows`: 0 none, 1 all, n one in n. */
  allowSample?: number;
  /** SYSLOG_IDENTIFIER of every entry (`leash`, `leash-watcher`, `leash-mcp`). */
  identifier?: string;
}): Journal {
  const stats: JournalStats = { sent: 0, dropped: {}, allowsSkipped: 0 };
  const sample = opts.allowSample ?? 0;
  const ident: [string, string] = ['SYSLOG_IDENTIFIER', opts.identifier ?? 'leash'];
  let allowCount = 0;
  return {
    socket: opts.socket,
    allowSample: sample,
    send(fields) {
      const err = opts.send(opts.socket, serializeEntry([...fields, ident]));
      if (err === 0) {
        stats.sent++;
        return true;
      }
      const name = ERRNO[err] ?? `E${err}`;
      stats.dropped[name] = (stats.dropped[name] ?? 0) + 1;
      return false;
    },
    sampleAllow() {
      if (sample === 1) return true;
      if (sample > 1 && allowCount++ % sample === 0) return true;
      stats.allowsSkipped++;
      return false;
    },
    stats: () => ({ ...stats, dropped: { ...stats.dropped } }),
  };
}

/** pino's numeric levels -> syslog priorities (trace/debug 7, info 6, warn 4, error 3, fatal 2). */
export function priorityOfLevel(level: number): string {
  if (level >= 60) return '2';
  if (level >= 50) return '3';
  if (level >= 40) return '4';
  if (level >= 30) return '6';
  return '7';
}

/** A key of an operational line -> its field name (`LEASH_` + upper case, other characters `_`). */
function fieldName(key: string): string | null {
  const n = `LEASH_${key.toUpperCase().replace(/[^A-Z0-9]/g, '_')}`.slice(0, 64);
  return NAME.test(n) ? n : null;
}

const SKIP_KEYS = new Set(['level', 'time', 'msg', 'service', 'component', 'pid', 'hostname']);

/**
 * The fields of one operational JSON line (pino's, or the watcher's own `{component, msg, …}`):
 * MESSAGE the msg, PRIORITY from the level, LEASH_COMPONENT, and every other key as LEASH_<KEY>
 * (objects as JSON).
 */
export function operationalFields(line: string): JournalFields {
  let o: Record<string, unknown>;
  try {
    const v = JSON.parse(line) as unknown;
    o = v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : { msg: line };
  } catch {
    o = { msg: line.trimEnd() };
  }
  const fields: JournalFields = [
    ['MESSAGE', typeof o.msg === 'string' ? o.msg : JSON.stringify(o)],
    ['PRIORITY', typeof o.level === 'number' ? priorityOfLevel(o.level) : o.level === 'error' ? '3' : '4'],
  ];
  if (typeof o.component === 'string') fields.push(['LEASH_COMPONENT', o.component]);
  for (const [k, v] of Object.entries(o)) {
    if (SKIP_KEYS.has(k) || v === undefined) continue;
    const name = fieldName(k);
    if (name !== null) fields.push([name, typeof v === 'string' ? v : JSON.stringify(v)]);
  }
  return fields;
}

/**
 * A pino destination that sends each line to the journal (and to `fallback` when the journal
 * refused it, so a last word before an exit is never lost).
 */
export function journalDestination(
  journal: Journal,
  fallback: { write(s: string): unknown },
): { write(s: string): void } {
  return {
    write(s: string) {
      if (!journal.send(operationalFields(s))) fallback.write(s);
    },
  };
}

/** The part of a decision's subject a person reads first. */
function subjectText(subject: unknown): string {
  if (typeof subject === 'string') return subject;
  if (subject === null || typeof subject !== 'object') return JSON.stringify(subject) ?? 'null';
  const s = subject as Record<string, unknown>;
  if (typeof s.dns === 'string') return `dns ${s.dns}${typeof s.qtype === 'string' ? ` ${s.qtype}` : ''}`;
  if (typeof s.path === 'string') return s.path;
  if (typeof s.host === 'string' || typeof s.ip === 'string') {
    const host = typeof s.host === 'string' ? s.host : String(s.ip);
    return s.port !== undefined ? `${host}:${String(s.port)}` : host;
  }
  if (typeof s.name === 'string') return s.name;
  return JSON.stringify(subject);
}

/** A decision's component: fixed (`watcher`, `mcp`) or told from the record (the service: proxy, dns, tools). */
export type Component = string | ((rec: DecisionRecord) => string);

const DECISION_PRIORITY: Record<string, string> = { block: '4', ask: '5', would_block: '5', allow: '6' };

/** The fields of one decision (its record and ref). */
export function decisionFields(rec: DecisionRecord & { ref: string }, component: Component): JournalFields {
  const what = subjectText(rec.subject);
  const rule = rec.rule ?? null;
  const fields: JournalFields = [
    [
      'MESSAGE',
      `${rec.action} ${rec.surface} uid ${rec.uid}: ${what} (${rec.reason}${rule !== null ? `, rule ${rule}` : ''}) ref ${rec.ref}`,
    ],
    ['PRIORITY', DECISION_PRIORITY[rec.action] ?? '5'],
    ['LEASH_COMPONENT', typeof component === 'string' ? component : component(rec)],
    ['LEASH_UID', String(rec.uid)],
    ['LEASH_SURFACE', rec.surface],
    ['LEASH_ACTION', rec.action],
    ['LEASH_REASON', rec.reason],
    ['LEASH_REF', rec.ref],
    ['LEASH_SUBJECT', JSON.stringify(rec.subject) ?? 'null'],
  ];
  if (rule !== null) fields.push(['LEASH_RULE', rule]);
  if (rec.severity !== undefined) fields.push(['LEASH_SEVERITY', rec.severity]);
  return fields;
}

/** One whole decision-log line (JSON, formatDecision's) -> its journal fields, or null when it is not one. */
function lineFields(line: string, component: Component): JournalFields | null {
  try {
    const o = JSON.parse(line) as DecisionRecord & { ref: string };
    return typeof o.action === 'string' && typeof o.ref === 'string' ? decisionFields(o, component) : null;
  } catch {
    return null;
  }
}

const ALLOW_MARK = Buffer.from('"action":"allow"');

/**
 * A decision writer (the service's log, the watcher's, the gate's) with every decision also sent
 * to the journal (allows as sampled). The file is written first: the record does not wait on the
 * view. Methods the writer does not have stay absent.
 */
export function teeDecisionsToJournal<L extends DecisionWriter>(log: L, journal: Journal, component: Component): L {
  const allowWanted = (action: string) => action !== 'allow' || journal.sampleAllow();
  const full = log as unknown as Partial<DecisionLog>;
  const tee: DecisionWriter & Partial<DecisionLog> = {
    write(rec) {
      const ref = log.write(rec);
      if (allowWanted(rec.action)) journal.send(decisionFields({ ...rec, ref }, component));
      return ref;
    },
  };
  if (full.writeTail) {
    const writeTail = full.writeTail.bind(log);
    tee.writeTail = (action, tail) => {
      const ref = writeTail(action, tail);
      if (allowWanted(action)) {
        const f = lineFields(`{"ref":${JSON.stringify(ref)}${tail}`, component);
        if (f !== null) journal.send(f);
      }
      return ref;
    };
  }
  if (full.writeLines) {
    const writeLines = full.writeLines.bind(log);
    tee.writeLines = (lines) => {
      writeLines(lines);
      let start = 0;
      while (start < lines.length) {
        let end = lines.indexOf(10, start);
        if (end < 0) end = lines.length;
        const line = lines.subarray(start, end);
        start = end + 1;
        if (line.length === 0) continue;
        // Allows are the bulk: told apart without parsing, and most are not sent at all.
        if (line.includes(ALLOW_MARK) && !journal.sampleAllow()) continue;
        const f = lineFields(line.toString('utf8'), component);
        if (f !== null) journal.send(f);
      }
    };
  }
  if (full.allowSink) {
    const allowSink = full.allowSink.bind(log);
    // Lines written elsewhere never reach the journal: only when it takes no allows.
    tee.allowSink = () => (journal.allowSample === 0 ? allowSink() : null);
  }
  if (full.allowsElsewhere) {
    const allowsElsewhere = full.allowsElsewhere.bind(log);
    tee.allowsElsewhere = (uid, surface, reason, allowed, written) => {
      for (let i = 0; i < allowed; i++) journal.sampleAllow(); // counted as skipped, as each of them would be
      allowsElsewhere(uid, surface, reason, allowed, written);
    };
  }
  // Everything else (flush, reopen, close) is the writer's own: the writers are plain objects of closures.
  return { ...log, ...tee };
}
