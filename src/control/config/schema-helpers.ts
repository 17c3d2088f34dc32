/**
 * The pieces every section of the config schema (./schema.ts) is built with: entry lists, modes,
 * inspection actions, the value checks that need more than a type, and `opt`/`obj`, which make a
 * field defaulted in the full config and optional in a fragment.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { parseNetworkEntry } from '../../engine/index.js';
import { LIST_MSG } from '../../tools/terminal/fields.js';

export const MODE_MSG = 'must be whitelist or blacklist';

export const entryList = (description: string) =>
  z.array(z.string({ error: 'must be a string' }), { error: LIST_MSG }).describe(description);

export const mode = (description: string) =>
  z.enum(['whitelist', 'blacklist'], { error: MODE_MSG }).describe(description);

export const inspectAction = (description: string) =>
  z.enum(['block', 'log', 'allow'], { error: 'must be block, log or allow' }).describe(description);

export const ipList = (description: string) =>
  z
    .array(
      z.string({ error: 'must be a string' }).refine((v) => isIP(v) !== 0, 'must be an IP address'),
      { error: LIST_MSG },
    )
    .describe(description);

export const absPathList = (description: string) =>
  z
    .array(
      z.string({ error: 'must be a string' }).refine((v) => v.startsWith('/'), 'must be an absolute path'),
      {
        error: LIST_MSG,
      },
    )
    .describe(description);

/** Why a decisions path can never be a log file (host-independent; the host checks are src/control/config/sink.ts). */
export function decisionsPathProblem(s: string): string | null {
  if (s === 'stdout' || !s.startsWith('/')) return null;
  if (/\p{Cc}/u.test(s)) return 'must not contain a NUL or control character';
  if (s === '/' || s.endsWith('/')) return 'must name a file, not a directory';
  if (s.split('/').some((seg, i) => i > 0 && (seg === '' || seg === '.' || seg === '..')))
    return 'must be a plain absolute path (no //, . or .. segments)';
  if (/^\/(proc|sys)(\/|$)/.test(s)) return 'must not be under /proc or /sys (kernel interfaces, not files)';
  if (/^\/dev\//.test(s) && s !== '/dev/null') return 'must not be a device (only /dev/null, which discards)';
  return null;
}

/** Why a `network.internal` entry is not an address range (a name or a port would never match an address). */
export function internalRangeProblem(v: string): string | null {
  const e = parseNetworkEntry(v);
  if ('problem' in e) return e.problem.message;
  if (e.kind !== 'ip') return 'must be an IP address or CIDR range, not a name';
  return e.port === null ? null : 'must be a range without a port';
}

export const bool = (description: string) => z.boolean({ error: 'must be true or false' }).describe(description);

/** A `host:port` on loopback only (the metrics port is never offered beyond this host). */
export function loopbackListen(s: string): boolean {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s);
  if (!m) return false;
  const host = m[1] ?? m[2]!;
  const port = Number(m[3]);
  return (
    port >= 1 &&
    port <= 65535 &&
    (host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host))
  );
}

/** The two helpers every section is built with: `opt` (a default, or optional in a fragment) and `obj`. */
export function helpers<F extends boolean>(fragment: F) {
  // In the full schema a missing field takes its default; in a fragment it stays absent, because
  // every key a fragment carries is a deliberate value that overrides the floor.
  // prefault (not default): zod 4 returns a default as-is, a prefault is parsed, so `network: {}`
  // and an absent `network` both come out with every inner default filled in.
  const opt = <T extends z.ZodType>(schema: T, dflt: unknown): F extends true ? z.ZodOptional<T> : z.ZodPrefault<T> =>
    (fragment ? schema.optional() : schema.prefault(dflt as never)) as never;
  const obj = <S extends z.ZodRawShape>(shape: S, description: string) =>
    z.strictObject(shape, { error: 'must be a mapping' }).describe(description);
  return { opt, obj };
}
