import { isIP } from 'node:net';
import type { Surface } from '../engine/types.js';
import { SURFACES } from '../engine/types.js';
import type { Effective, Fragment } from './fragment.js';
import { fold } from './fragment.js';

/**
 * An entry that can never decide anything. An inert allow is a warning (it grants nothing);
 * an inert deny is critical: it reads as a block and blocks nothing.
 */
export interface InertEntry {
  path: string;
  entry: string;
  severity: 'warning' | 'critical';
  why: string;
}

const LABEL = /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/i;

function domainOk(d: string): boolean {
  let host = d.replace(/\.$/, '');
  if (host.startsWith('*.')) host = host.slice(2);
  return host.length > 0 && host.length <= 253 && host.split('.').every((l) => LABEL.test(l));
}

function networkEntryOk(e: string): boolean {
  let host = e;
  const v6port = /^\[([^\]]+)\]:(\d+)$/.exec(e);
  if (v6port) {
    if (Number(v6port[2]) < 1 || Number(v6port[2]) > 65535) return false;
    return isIP(v6port[1] ?? '') === 6;
  }
  if (isIP(e)) return true;
  const cidr = /^(.+)\/(\d{1,3})$/.exec(e);
  if (cidr) {
    const fam = isIP(cidr[1] ?? '');
    const bits = Number(cidr[2]);
    return (fam === 4 && bits <= 32) || (fam === 6 && bits <= 128);
  }
  const hp = /^(.+):(\d+)$/.exec(e);
  if (hp) {
    const port = Number(hp[2]);
    if (port < 1 || port > 65535) return false;
    host = hp[1] ?? '';
    if (isIP(host) === 4) return true;
  }
  return domainOk(host);
}

/** Why an entry of `surface` can never match anything, or null when it can. */
export function entryProblem(surface: Surface, e: string): string | null {
  if (e.trim() !== e || e === '') return 'leading/trailing whitespace or empty';
  switch (surface) {
    case 'filesystem':
      return e.startsWith('/') ? null : 'filesystem entries are absolute paths; a relative one matches nothing';
    case 'commands':
      return e.includes('/') && !e.startsWith('/')
        ? 'a command with a / is an absolute path; a relative one matches nothing'
        : null;
    case 'network':
      return networkEntryOk(e) ? null : 'not a domain, IP, CIDR or host:port';
    case 'tools':
      return /\s/.test(e) ? 'tool names contain no whitespace' : null;
  }
}

/** Every inert entry of a resolved policy. */
export function inertEntries(p: Effective): InertEntry[] {
  const out: InertEntry[] = [];
  for (const s of SURFACES) {
    const sec = p[s];
    sec.allow.forEach((e, i) => {
      const why = entryProblem(s, e);
      if (why) out.push({ path: `${s}.allow[${i}]`, entry: e, severity: 'warning', why });
      else if (sec.mode === 'blacklist')
        out.push({
          path: `${s}.allow[${i}]`,
          entry: e,
          severity: 'warning',
          why: 'blacklist mode never consults allow',
        });
    });
    sec.deny.forEach((e, i) => {
      const why = entryProblem(s, e);
      if (why) out.push({ path: `${s}.deny[${i}]`, entry: e, severity: 'critical', why });
    });
  }
  return out;
}

/** The inert entries a fragment itself writes, judged where it lands (folded over `base`). */
export function inertInFragment(f: Fragment, base: Effective): InertEntry[] {
  const folded = fold(base, f);
  return inertEntries(folded).filter((i) => {
    const [surface, list] = i.path.replace(/\[\d+\]$/, '').split('.') as [Surface, 'allow' | 'deny'];
    return f[surface]?.[list] !== undefined || (list === 'allow' && f[surface]?.mode !== undefined);
  });
}
