/**
 * `leash logs`' filters and its one-line-per-decision text: what an operator reads in a log in
 * which blocks are a handful of lines among thousands of allows.
 */
import { SURFACES } from '../engine/types.js';
import { LeashError } from '../errors.js';

export const LOG_ACTIONS = ['allow', 'block', 'ask', 'would_block'] as const;

export interface LogFilter {
  actions: Set<string> | null;
  uid: number | null;
  surfaces: Set<string> | null;
  /** Epoch ms: lines older than this are not shown. */
  since: number | null;
}

/** The fields of a decision line a filter and the text format read. */
export interface LogLine {
  ts?: string;
  ref?: string;
  uid?: number;
  surface?: string;
  action?: string;
  reason?: string;
  subject?: unknown;
  rule?: string | null;
}

const bad = (what: string, value: string, message: string) =>
  new LeashError('log_filter_invalid', `--${what} ${JSON.stringify(value)}: ${message}`, { [what]: value });

function list(what: string, value: string, allowed: readonly string[]): Set<string> {
  const out = new Set<string>();
  for (const v of value.split(',')) {
    const t = v.trim();
    if (!allowed.includes(t)) throw bad(what, value, `must be one or more of ${allowed.join(', ')}, comma-separated`);
    out.add(t);
  }
  return out;
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `10m`, `2h`, `90s`, `1d` back from `now`, or an ISO 8601 timestamp (with a zone, or UTC). */
export function parseSince(value: string, now = Date.now()): number {
  const d = /^(\d{1,9})([smhd])$/.exec(value.trim());
  if (d) return now - Number(d[1]) * UNITS[d[2]!]!;
  if (/^\d{4}-\d{2}-\d{2}([T ][\d:.]+)?(Z|[+-]\d{2}:?\d{2})?$/.test(value.trim())) {
    const t = Date.parse(value.trim());
    if (Number.isFinite(t)) return t;
  }
  throw bad('since', value, 'must be a duration (30s, 10m, 2h, 1d) or a timestamp (2026-12-06T05:20:00Z)');
}

/**
 * Builds a filter from the options as typed. `subject` is a UID or an account name, resolved by
 * `uidOf` (the host's passwd); an unknown name is refused rather than matching nothing in silence.
 */
export function parseLogFilter(
  o: { action?: string; subject?: string; surface?: string; since?: string },
  uidOf: (name: string) => number | null,
  now = Date.now(),
): LogFilter {
  let uid: number | null = null;
  if (o.subject !== undefined) {
    if (/^\d{1,10}$/.test(o.subject)) uid = Number(o.subject);
    else {
      uid = uidOf(o.subject);
      if (uid === null) throw bad('subject', o.subject, 'no such account on this host (give a UID or an account name)');
    }
  }
  return {
    actions: o.action === undefined ? null : list('action', o.action, LOG_ACTIONS),
    uid,
    surfaces: o.surface === undefined ? null : list('surface', o.surface, SURFACES),
    since: o.since === undefined ? null : parseSince(o.since, now),
  };
}

export function isFiltering(f: LogFilter): boolean {
  return f.actions !== null || f.uid !== null || f.surfaces !== null || f.since !== null;
}

/** The line as a decision, or null when it is not one (not JSON, or no action). */
export function parseLogLine(text: string): LogLine | null {
  if (text[0] !== '{') return null;
  try {
    const o = JSON.parse(text) as LogLine;
    return o !== null && typeof o === 'object' && typeof o.action === 'string' ? o : null;
  } catch {
    return null;
  }
}

/**
 * Whether a line passes. Lines that are not decisions pass only an empty filter. The cheap
 * substring tests come first: most lines of a busy log are allows that a block filter rejects
 * without parsing.
 */
export function matchLine(f: LogFilter, text: string): { ok: boolean; line: LogLine | null } {
  if (f.actions !== null && f.actions.size === 1) {
    const [a] = f.actions;
    if (!text.includes(`"action":"${a}"`)) return { ok: false, line: null };
  }
  if (f.uid !== null && !text.includes(`"uid":${f.uid},`)) return { ok: false, line: null };
  const line = parseLogLine(text);
  if (line === null) return { ok: !isFiltering(f), line };
  if (f.actions !== null && !f.actions.has(line.action!)) return { ok: false, line };
  if (f.uid !== null && line.uid !== f.uid) return { ok: false, line };
  if (f.surfaces !== null && !f.surfaces.has(String(line.surface))) return { ok: false, line };
  if (f.since !== null && !(Date.parse(String(line.ts)) >= f.since)) return { ok: false, line };
  return { ok: true, line };
}

/** The part of a subject a person reads first (a path, host:port, a tool's name). */
export function subjectText(subject: unknown): string {
  if (typeof subject === 'string') return subject;
  if (subject === null || typeof subject !== 'object') return JSON.stringify(subject) ?? '';
  const s = subject as Record<string, unknown>;
  if (typeof s.allowed === 'number') {
    return `${s.allowed} allowed${typeof s.written === 'number' && s.written > 0 ? ` (${s.written} written)` : ''}${
      typeof s.since === 'string' ? ` since ${s.since.slice(11, 19)}` : ''
    }`;
  }
  if (typeof s.dns === 'string') return `dns ${s.dns}${typeof s.qtype === 'string' ? ` ${s.qtype}` : ''}`;
  const host = s.domain ?? s.host ?? s.ip;
  if (typeof host === 'string') return s.port !== undefined ? `${host}:${String(s.port)}` : host;
  for (const k of ['path', 'binary', 'name', 'method']) if (typeof s[k] === 'string') return s[k] as string;
  return JSON.stringify(subject);
}

/** One decision as a line of text: time, action, surface, subject, what, reason, rule, ref. */
export function formatLogLine(l: LogLine, accountOf: (uid: number) => string | null): string {
  const ts = typeof l.ts === 'string' ? l.ts.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '?';
  const who = typeof l.uid === 'number' ? `${accountOf(l.uid) ?? 'uid'}(${l.uid})` : '?';
  const rule = typeof l.rule === 'string' ? ` rule ${l.rule}` : '';
  return `${ts}  ${String(l.action).padEnd(11)} ${String(l.surface ?? '').padEnd(10)} ${who}  ${subjectText(l.subject)}  [${String(l.reason)}${rule}] ${l.ref ?? ''}`;
}
