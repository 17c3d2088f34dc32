import type { Config } from '../config/types.js';
import type { FailMode, InspectAction, InspectCategory, Mode, Surface } from '../engine/types.js';
import { SURFACES } from '../engine/types.js';

/**
 * The part of a config a tier may set: everything that is policy (not `user`, not `logging`).
 * A fully-resolved subject policy has this shape; it is a structural superset of the engine's PolicyInput.
 */
export type Effective = Omit<Config, 'user' | 'logging'>;

/**
 * A profile: only the keys it sets. Every key present is a deliberate value of that tier and
 * replaces the base's value (lists included), so a dropped deny entry is visible to the judge.
 */
export interface Fragment {
  fail_mode?: FailMode;
  network?: Partial<Effective['network']>;
  filesystem?: Partial<Effective['filesystem']>;
  commands?: Partial<Effective['commands']>;
  tools?: Partial<Omit<Effective['tools'], 'inspect'>> & { inspect?: Partial<Record<InspectCategory, InspectAction>> };
  enforcers?: Partial<Effective['enforcers']>;
}

export const INSPECT_CATEGORIES: readonly InspectCategory[] = ['secrets', 'pii', 'priv_esc'];
const MODES: readonly Mode[] = ['whitelist', 'blacklist'];
const INSPECT_ACTIONS: readonly InspectAction[] = ['block', 'log', 'allow'];

/** One `path: message` problem, like the config loader prints. */
export interface FragmentIssue {
  path: string;
  message: string;
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkKeys(o: Record<string, unknown>, allowed: readonly string[], at: string, issues: FragmentIssue[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k))
      issues.push({ path: at ? `${at}.${k}` : k, message: `unknown key (a profile sets only policy keys)` });
  }
}

function checkList(v: unknown, at: string, issues: FragmentIssue[]): void {
  if (!Array.isArray(v) || v.some((e) => typeof e !== 'string' || e.trim() === '')) {
    issues.push({ path: at, message: 'must be a list of non-empty strings' });
  }
}

function checkEnum(v: unknown, values: readonly string[], at: string, issues: FragmentIssue[]): void {
  if (typeof v !== 'string' || !values.includes(v))
    issues.push({ path: at, message: `must be one of ${values.join(', ')}` });
}

const SURFACE_KEYS: Record<Surface, readonly string[]> = {
  network: ['mode', 'allow', 'deny', 'dns_resolvers', 'udp'],
  filesystem: ['mode', 'allow', 'deny', 'watch'],
  commands: ['mode', 'allow', 'deny'],
  tools: ['mode', 'allow', 'deny', 'inspect'],
};

/**
 * Validates a parsed profile document as a fragment. `user` and `logging` are refused: a profile
 * re-pointing whose account is confined, or where its decisions go, is not policy.
 */
export function validateFragment(
  doc: unknown,
): { ok: true; fragment: Fragment } | { ok: false; issues: FragmentIssue[] } {
  const issues: FragmentIssue[] = [];
  if (doc === null || doc === undefined) return { ok: true, fragment: {} };
  if (!isObj(doc)) return { ok: false, issues: [{ path: '', message: 'a profile is a mapping of policy keys' }] };
  checkKeys(doc, ['fail_mode', ...SURFACES, 'enforcers'], '', issues);
  if ('fail_mode' in doc) checkEnum(doc.fail_mode, ['closed', 'open'], 'fail_mode', issues);
  for (const s of SURFACES) {
    if (!(s in doc)) continue;
    const sec = doc[s];
    if (!isObj(sec)) {
      issues.push({ path: s, message: 'must be a mapping' });
      continue;
    }
    checkKeys(sec, SURFACE_KEYS[s], s, issues);
    if ('mode' in sec) checkEnum(sec.mode, MODES, `${s}.mode`, issues);
    for (const k of ['allow', 'deny', 'dns_resolvers', 'watch']) if (k in sec) checkList(sec[k], `${s}.${k}`, issues);
    if ('udp' in sec) checkEnum(sec.udp, ['drop', 'allow'], `${s}.udp`, issues);
    if ('inspect' in sec) {
      const ins = sec.inspect;
      if (!isObj(ins)) issues.push({ path: `${s}.inspect`, message: 'must be a mapping' });
      else {
        checkKeys(ins, INSPECT_CATEGORIES, `${s}.inspect`, issues);
        for (const c of INSPECT_CATEGORIES)
          if (c in ins) checkEnum(ins[c], INSPECT_ACTIONS, `${s}.inspect.${c}`, issues);
      }
    }
  }
  if ('enforcers' in doc) {
    const en = doc.enforcers;
    if (!isObj(en)) issues.push({ path: 'enforcers', message: 'must be a mapping' });
    else {
      checkKeys(en, ['network', 'filesystem', 'tools'], 'enforcers', issues);
      for (const [k, v] of Object.entries(en))
        if (typeof v !== 'boolean') issues.push({ path: `enforcers.${k}`, message: 'must be true or false' });
    }
  }
  return issues.length ? { ok: false, issues } : { ok: true, fragment: doc as Fragment };
}

/** Folds a fragment over a base: keys the fragment sets replace the base's; nothing else changes. */
export function fold(base: Effective, f: Fragment): Effective {
  const out: Effective = structuredClone(base);
  if (f.fail_mode !== undefined) out.fail_mode = f.fail_mode;
  if (f.network) Object.assign(out.network, stripUndef(f.network));
  if (f.filesystem) Object.assign(out.filesystem, stripUndef(f.filesystem));
  if (f.commands) Object.assign(out.commands, stripUndef(f.commands));
  if (f.tools) {
    const { inspect, ...rest } = f.tools;
    Object.assign(out.tools, stripUndef(rest));
    if (inspect) Object.assign(out.tools.inspect, stripUndef(inspect));
  }
  if (f.enforcers) Object.assign(out.enforcers, stripUndef(f.enforcers));
  return structuredClone(out);
}

function stripUndef<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The policy part of a loaded config: the floor every subject starts from. */
export function floorOf(c: Config): Effective {
  const { user: _u, logging: _l, ...rest } = c;
  return structuredClone(rest);
}

/** Key-sorted JSON: equal policies hash equally whatever order their YAML was written in. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (isObj(v)) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}
