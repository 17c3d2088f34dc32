/**
 * The bindings store: bindings.yaml (which profile is bound to which scope, with its acks), the
 * scope grammar, the one writer lock for bindings and profiles, and the unbind ledger. Atomic writes,
 * the lock and durable appends are src/store/files.ts; consent is consent.ts; the commands that
 * change bindings are commands.ts.
 */
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { parseStrictYaml } from '../config/strict-yaml.js';
import { LeashError } from '../errors.js';
import type { PasswdEntry } from '../subjects/discovery.js';
import { AGENT_PREFIX } from '../subjects/discovery.js';
import { appendLineDurable, atomicWriteFileSync } from '../store/files.js';

export type Scope = 'global' | `agent:${string}`;

/** One profile attached to one scope. Consent (acks) lives here, never in the profile. */
export interface Binding {
  profile: string;
  acks: string[];
  /** Shadow mode set on the binding (`leash bind --enforce`): wins over the profile's `enforce`. Absent = the profile's. */
  enforce?: 'enforce' | 'shadow';
}

/** The fragment a binding applies: its profile's, with the binding's own `enforce` over the profile's. */
export function bindingFragment<F extends { enforce?: 'enforce' | 'shadow' }>(b: Binding, f: F): F {
  return b.enforce === undefined ? f : { ...f, enforce: b.enforce };
}

export interface BindingsDoc {
  version: 1;
  bindings: Partial<Record<Scope, Binding>>;
}

export function bindingsFile(stateDir: string): string {
  return path.join(stateDir, 'bindings.yaml');
}
export function ledgerFile(stateDir: string): string {
  return path.join(stateDir, 'unbinds.jsonl');
}
/** The one writer lock for bindings and profiles together (the profile library has none of its own). */
export function writerLock(stateDir: string): string {
  return `${bindingsFile(stateDir)}.lock`;
}

function corrupt(file: string, why: string): LeashError {
  return new LeashError('bindings_corrupt', `${file} is corrupt: ${why}`, { file });
}

export const SCOPE_RE = /^(global|agent:[a-z_][a-z0-9_.-]*\$?)$/;

/** The last text of bindings.yaml a long-lived reader parsed, and its document (read-only to that reader). */
export interface BindingsCache {
  text?: string;
  doc?: BindingsDoc;
}

/**
 * Reads bindings.yaml; missing is empty, malformed is `bindings_corrupt` (never "no bindings"). With `cache`, a
 * text equal to the last one read gives the last document again without parsing it (the service's reconcile;
 * a command that edits the document reads without one).
 */
export function readBindings(stateDir: string, cache?: BindingsCache): BindingsDoc {
  const file = bindingsFile(stateDir);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, bindings: {} };
    throw corrupt(file, (e as Error).message);
  }
  if (cache?.doc && cache.text === text) return cache.doc;
  const doc = parseBindingsText(text, file);
  if (cache) {
    cache.text = text;
    cache.doc = doc;
  }
  return doc;
}

/** Parses bindings.yaml text (the store's file, or the one `leash apply` is committing). */
export function parseBindingsText(text: string, file: string): BindingsDoc {
  let doc: unknown;
  try {
    // The strict reader: no anchors, aliases, merge keys or tags; bounded sizes.
    doc = parseStrictYaml(text, file, { uniqueKeys: true }).js;
  } catch (e) {
    throw corrupt(file, (e as Error).message);
  }
  if (doc === null || doc === undefined) return { version: 1, bindings: {} };
  const b = (doc as { bindings?: unknown }).bindings ?? {};
  if (typeof b !== 'object' || b === null || Array.isArray(b)) throw corrupt(file, 'bindings is not a mapping');
  const out: BindingsDoc = { version: 1, bindings: {} };
  for (const [scope, v] of Object.entries(b as Record<string, unknown>)) {
    if (!SCOPE_RE.test(scope)) throw corrupt(file, `bad scope ${scope}`);
    const e = v as { profile?: unknown; acks?: unknown; enforce?: unknown } | null;
    if (typeof e?.profile !== 'string') throw corrupt(file, `${scope}: no profile`);
    const acks = e.acks ?? [];
    if (!Array.isArray(acks) || acks.some((a) => typeof a !== 'string'))
      throw corrupt(file, `${scope}: acks is not a list of strings`);
    if (e.enforce !== undefined && e.enforce !== 'enforce' && e.enforce !== 'shadow')
      throw corrupt(file, `${scope}: enforce is not enforce or shadow`);
    out.bindings[scope as Scope] = {
      profile: e.profile,
      acks: acks as string[],
      ...(e.enforce !== undefined ? { enforce: e.enforce } : {}),
    };
  }
  return out;
}

export function serializeBindings(doc: BindingsDoc): string {
  const sorted = Object.fromEntries(
    Object.entries(doc.bindings).sort(([a], [b]) => (a === 'global' ? -1 : b === 'global' ? 1 : a.localeCompare(b))),
  );
  return `# Written by leash bind/unbind/profile save. Edit with the CLI: acks are consent, judged on write.\n${YAML.stringify({ version: 1, bindings: sorted }, { aliasDuplicateObjects: false })}`;
}

export function writeBindings(stateDir: string, doc: BindingsDoc): void {
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
  atomicWriteFileSync(bindingsFile(stateDir), serializeBindings(doc));
}

/**
 * Checks a scope against passwd. `agent:<account>` must name an existing `leash-*` account:
 * a display name (`agent:Iris`) would bind nobody, silently, so it is refused, naming the real
 * account when one matches (case-insensitively, by its gecos name, or as `leash-<name>`).
 */
export function parseScope(raw: string, accounts: PasswdEntry[], configuredUser: string | null): Scope {
  if (raw === 'global') return 'global';
  const m = /^agent:(.+)$/.exec(raw);
  if (!m)
    throw new LeashError(
      'scope_invalid',
      `scope ${JSON.stringify(raw)} must be global or agent:<account> (team is not a scope)`,
      { scope: raw },
    );
  const name = m[1] ?? '';
  const exact = accounts.find((a) => a.name === name);
  if (exact && name.startsWith(AGENT_PREFIX) && name !== configuredUser) return `agent:${name}`;
  if (exact && name === configuredUser) {
    throw new LeashError(
      'scope_invalid',
      `${name} is the configured user: it resolves to the floor and has no tier of its own`,
      { scope: raw, account: name },
    );
  }
  if (exact) {
    throw new LeashError(
      'scope_invalid',
      `${name} is not an agent account (discovery confines only ${AGENT_PREFIX}* accounts)`,
      { scope: raw, account: name },
    );
  }
  const low = name.toLowerCase();
  const slug = low.replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
  const candidates = accounts.filter(
    (a) =>
      a.name.startsWith(AGENT_PREFIX) &&
      (a.name.toLowerCase() === low ||
        a.name.toLowerCase() === `${AGENT_PREFIX}${low}` ||
        a.name === `${AGENT_PREFIX}${slug}` ||
        (a.gecos.split(',')[0] ?? '').trim().toLowerCase() === low),
  );
  const hint = candidates.length ? `; did you mean ${candidates.map((c) => `agent:${c.name}`).join(' or ')}?` : '';
  throw new LeashError(
    'scope_unknown_account',
    `no account ${JSON.stringify(name)} in passwd: a scope names the Linux account, never a display name${hint}`,
    { scope: raw, suggestions: candidates.map((c) => c.name) },
  );
}

/** Appends one record to the unbind ledger, durably; `ledger_unwritable` when it cannot. */
export function ledgerAppend(stateDir: string, rec: Record<string, unknown>): void {
  try {
    fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
    appendLineDurable(
      ledgerFile(stateDir),
      JSON.stringify({ ts: new Date().toISOString(), by_uid: process.getuid?.() ?? null, ...rec }),
    );
  } catch (e) {
    throw new LeashError(
      'ledger_unwritable',
      `cannot write ${ledgerFile(stateDir)} (${(e as Error).message}): nothing was removed`,
      {
        file: ledgerFile(stateDir),
      },
    );
  }
}
