/**
 * `leash learn`: from a subject's `would_block` and `block` decision lines, the tightest profile
 * fragment that would have allowed exactly what was seen (network, filesystem, commands), with notes.
 * Pure over the lines and policies it is given; src/cli/learn.ts reads the log and writes the file.
 */
import { isIP } from 'node:net';
import { SURFACES } from '../../engine/types.js';
import type { Effective, Fragment } from './fragment.js';
import { fold } from './fragment.js';
import { loosenings, type Loosening } from './loosen.js';

/** The surfaces learn proposes entries for. */
export const LEARNED_SURFACES = ['network', 'filesystem', 'commands'] as const;
type LearnedSurface = (typeof LEARNED_SURFACES)[number];

/** One decision line, as much of it as learn reads. */
export interface SeenLine {
  ts: string;
  uid: number;
  surface: string;
  action: string;
  reason: string;
  subject: unknown;
  rule?: string | null;
}

export interface LearnResult {
  /** The fragment: each surface seen, its mode kept, its allow list the present one plus what was learned. */
  fragment: Fragment;
  /** Entries added per surface, in first-seen order. */
  added: Record<LearnedSurface, string[]>;
  /** Deny entries of the present policy that were hit and are dropped from the proposal. */
  dropped: Record<LearnedSurface, string[]>;
  /** What the proposal allows beyond the floor (each also a comment in the file). */
  widerThanFloor: Loosening[];
  /** Lines seen but not turned into entries, and why (DNS-only names, reasons no entry can fix). */
  leftOut: string[];
  /** Lines of the subject in the window that were read (would_block + block). */
  considered: number;
}

/** Reasons an allow entry (or dropping a deny entry) can turn into an allow; the rest no entry fixes. */
const ENTRY_REASONS = new Set(['not_allowed', 'deny_entry']);

function plainIp(ip: string): string {
  const m = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(ip);
  return m ? m[1]! : ip;
}

/** The tightest network entry for one connection: its name (or address) pinned to its port. */
export function networkEntry(s: { domain?: unknown; ip?: unknown; port?: unknown }): string | null {
  const port = typeof s.port === 'number' && Number.isInteger(s.port) && s.port > 0 && s.port < 65536 ? s.port : null;
  const domain = typeof s.domain === 'string' && s.domain.length > 0 ? s.domain.toLowerCase().replace(/\.$/, '') : null;
  const ip = typeof s.ip === 'string' && isIP(plainIp(s.ip)) ? plainIp(s.ip) : null;
  // A name that is an address literal is judged as the address; localhost is a name.
  const host = domain !== null && !isIP(domain) ? domain : ip;
  if (host === null) return null;
  const v6 = isIP(host) === 6;
  if (port === null) return host;
  return v6 ? `[${host}]:${port}` : `${host}:${port}`;
}

function entryOf(surface: LearnedSurface, subject: unknown): string | null {
  if (subject === null || typeof subject !== 'object') return null;
  const s = subject as Record<string, unknown>;
  if (surface === 'network') return networkEntry(s);
  const v = surface === 'filesystem' ? s.path : s.binary;
  return typeof v === 'string' && v.startsWith('/') ? v : null;
}

/**
 * The proposal. `current` is the subject's resolved policy now (its allow lists are kept: a fragment's
 * list replaces the base's whole), `floor` what "wider than the floor" is judged against.
 */
export function learnFragment(lines: SeenLine[], current: Effective, floor: Effective): LearnResult {
  const added: LearnResult['added'] = { network: [], filesystem: [], commands: [] };
  const dropped: LearnResult['dropped'] = { network: [], filesystem: [], commands: [] };
  const leftOut: string[] = [];
  const dnsOnly = new Set<string>();
  const touched = new Set<LearnedSurface>();
  for (const l of lines) {
    const surface = l.surface as LearnedSurface;
    if (!(LEARNED_SURFACES as readonly string[]).includes(surface)) {
      leftOut.push(`${l.surface} ${l.action} ${l.reason}: learn proposes network, filesystem and commands only`);
      continue;
    }
    const sp = current[surface];
    const subj = (l.subject ?? {}) as Record<string, unknown>;
    if (surface === 'network' && typeof subj.dns === 'string') {
      if (ENTRY_REASONS.has(l.reason)) dnsOnly.add(subj.dns.toLowerCase().replace(/\.$/, ''));
      continue;
    }
    if (!ENTRY_REASONS.has(l.reason)) {
      leftOut.push(`${surface} ${l.action} ${l.reason} ${JSON.stringify(l.subject)}: no entry allows it`);
      continue;
    }
    if (l.reason === 'deny_entry') {
      const rule = typeof l.rule === 'string' ? l.rule : null;
      if (rule !== null && sp.deny.includes(rule) && !dropped[surface].includes(rule)) dropped[surface].push(rule);
      touched.add(surface);
      if (sp.mode === 'blacklist') continue; // blacklist: dropping the deny entry is what allows it
    }
    if (sp.mode === 'blacklist') continue;
    const e = entryOf(surface, l.subject);
    if (e === null) {
      leftOut.push(`${surface} ${l.reason} ${JSON.stringify(l.subject)}: no entry can name it`);
      continue;
    }
    touched.add(surface);
    if (!sp.allow.includes(e) && !added[surface].includes(e)) added[surface].push(e);
  }
  // A name looked up but never connected to: a lookup is answered once any port of the name is allowed.
  const connected = new Set(added.network.map((e) => e.replace(/:\d+$/, '')));
  for (const n of dnsOnly)
    if (!connected.has(n) && !current.network.allow.some((a) => a === n || a.startsWith(`${n}:`)))
      leftOut.push(`network lookup of ${n} only (never connected): no entry added`);

  const fragment: Fragment = {};
  for (const s of LEARNED_SURFACES) {
    if (!touched.has(s)) continue;
    const sp = current[s];
    (fragment as Record<string, unknown>)[s] = {
      mode: sp.mode,
      allow: [...sp.allow, ...added[s]],
      deny: sp.deny.filter((d) => !dropped[s].includes(d)),
    };
  }
  const widerThanFloor = loosenings(floor, fold(floor, fragment)).filter((f) =>
    SURFACES.some((s) => f.field.startsWith(`${s}.`)),
  );
  return { fragment, added, dropped, widerThanFloor, leftOut, considered: lines.length };
}

/** The proposal as a profile file: notes as comments, then the fragment (enforce, as a profile, is left to bind). */
export function renderLearned(
  r: LearnResult,
  o: { subject: string; since: string; now: Date },
  stringify: (v: unknown) => string,
): string {
  const notes: string[] = [
    `Proposed by leash learn for ${o.subject} from its would_block and block lines since ${o.since} (to ${o.now.toISOString()}).`,
    `Read ${r.considered} lines. Every list below replaces the base's whole: present entries are kept, learned ones appended.`,
  ];
  for (const s of LEARNED_SURFACES) {
    if (r.added[s].length) notes.push(`${s}: learned ${r.added[s].join(', ')}`);
    if (r.dropped[s].length) notes.push(`${s}: deny entries hit and dropped: ${r.dropped[s].join(', ')}`);
  }
  for (const f of r.widerThanFloor) notes.push(`WIDER THAN THE FLOOR (binding needs --ack '${f.token}'): ${f.words}`);
  for (const l of r.leftOut) notes.push(`left out: ${l}`);
  if (!Object.keys(r.fragment).length) notes.push('nothing to learn: no would_block or block line an entry can allow');
  const body = Object.keys(r.fragment).length ? stringify(r.fragment) : '{}\n';
  return notes.map((n) => `# ${n.replace(/[\r\n]+/g, ' ')}\n`).join('') + body;
}

/** `30s`, `15m`, `2h`, `7d` (or a bare number of seconds) in milliseconds; null when not a duration. */
export function parseDuration(s: string): number | null {
  const m = /^(\d{1,9})(s|m|h|d)?$/.exec(s.trim());
  if (!m) return null;
  const n = Number(m[1]);
  const unit = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(m[2] ?? 's') as 's' | 'm' | 'h' | 'd'];
  return n > 0 ? n * unit : null;
}
