import type { Config } from '../config/types.js';
import type { ConfigFragment } from '../config/schema.js';
import type { InspectCategory } from '../../engine/types.js';

/**
 * The part of a config a tier may set: everything that is policy (not `user`, `logging` or `host`).
 * A fully-resolved subject policy has this shape; it is a structural superset of the engine's PolicyInput.
 */
export type Effective = Omit<Config, 'user' | 'logging' | 'host' | 'approvals' | 'console'>;

/**
 * A profile: only the keys it sets (the config's fragment schema, minus `user`, `logging` and `host`).
 * Every key present is a deliberate value of that tier and replaces the base's value (lists
 * included), so a dropped deny entry is visible to the judge.
 */
export type Fragment = Omit<ConfigFragment, 'user' | 'logging' | 'host' | 'approvals' | 'console'>;

export const INSPECT_CATEGORIES: readonly InspectCategory[] = ['secrets', 'pii', 'priv_esc'];

/** Folds a fragment over a base: keys the fragment sets replace the base's; nothing else changes. */
export function fold(base: Effective, f: Fragment): Effective {
  const out: Effective = structuredClone(base);
  if (f.fail_mode !== undefined) out.fail_mode = f.fail_mode;
  if (f.enforce !== undefined) out.enforce = f.enforce;
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
  const { user: _u, logging: _l, host: _h, approvals: _a, console: _c, ...rest } = c;
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

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
