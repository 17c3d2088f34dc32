/**
 * The bindings store: bindings.yaml (which profile is bound to which scope, with its acks), the
 * scope grammar, the one writer lock for bindings and profiles, and the unbind ledger. Atomic writes,
 * the lock and durable appends are src/store/files.ts; consent is consent.ts; the commands that
 * change bindings are commands.ts.
 */
import fs from 'node:fs';
import path from 'node:path';
import YAML, { Lexer } from 'yaml';
import { checkLimits, parseStrictYaml, type TextLimits } from '../../formats/yaml.js';
import { LeashError } from '../../errors.js';
import type { PasswdEntry } from '../subjects/discovery.js';
import { AGENT_PREFIX } from '../subjects/discovery.js';
import { appendLineDurable, atomicWriteFileSync } from '../../store/files.js';

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
  /** Each binding's text as serializeBindings writes it -> that binding, parsed and checked (see readBindings). */
  entries?: Map<string, CachedEntry>;
}

interface CachedEntry {
  scope: Scope;
  binding: Binding;
  /** YAML tokens of the entry, for the file's token budget. */
  tokens: number;
}

/**
 * Reads bindings.yaml; missing is empty, malformed is `bindings_corrupt` (never "no bindings"). With `cache`, a
 * text equal to the last one read gives the last document again without parsing it (the service's reconcile;
 * a command that edits the document reads without one), and a text in the shape serializeBindings writes parses
 * only the bindings whose text is new: at 1,000 bindings the whole file took 80-230 ms to parse, so one ack or
 * bind cost every subject's pass that much.
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
  // A first read (a start) parses the whole text at once: entry by entry, with no entry known yet, is a parse, a
  // serialization and a lexing per binding (at 1,000 bindings about 0.6 s of a start, against one parse).
  if (cache?.doc && !cache.entries) warmBindings(cache);
  const byEntries = cache?.entries ? parseByEntries(text, file, cache) : null;
  const doc = byEntries ?? parseBindingsText(text, file);
  if (cache) {
    cache.text = text;
    cache.doc = doc;
    // Read whole (a start, a hand-written file, a hand edit): the entries the CLI's next write will hold are made
    // by warmBindings, after a start or at the next read, so that write is read entry by entry like any other.
    if (!byEntries) delete cache.entries;
  }
  return doc;
}

/**
 * Makes the entries of the last document read whole, for the next read to go entry by entry: a caller with time
 * to spare calls it (the service, once it is ready); otherwise the next read of a changed text does.
 */
export function warmBindings(cache: BindingsCache): void {
  if (cache.doc && !cache.entries) cache.entries = entriesOf(cache.doc);
}

/**
 * bindings.yaml's own caps: one file holds every agent's binding, so a policy file's 1 MiB and 10,000 items would
 * stop a fleet at about 5,000 agents. At 20,000 bindings (two acks each) the file is about 4 MB; read entry by entry
 * (the shape the CLI writes) a change costs one entry's parse, while a whole strict parse (a hand-edited file)
 * takes seconds and ~135 MB, which is why the caps stop there. writeBindings refuses to write past them.
 */
export const BINDINGS_LIMITS: TextLimits = { maxBytes: 8 * 1024 * 1024, maxListItems: 20_000, maxTokens: 1_000_000 };

const HEADER = '# Written by leash bind/unbind/profile save. Edit with the CLI: acks are consent, judged on write.\n';
const PREFIX = `${HEADER}version: 1\nbindings:\n`;

/** One binding's text exactly as serializeBindings writes it in a document of its own. */
function entryText(scope: Scope, b: Binding): string {
  return serializeBindings({ version: 1, bindings: { [scope]: b } }).slice(PREFIX.length);
}

function tokensOf(text: string): number {
  let n = 0;
  for (const _ of new Lexer().lex(text)) n++;
  return n;
}

/** Each binding of a document under the text serializeBindings writes for it. */
function entriesOf(doc: BindingsDoc): Map<string, CachedEntry> {
  const out = new Map<string, CachedEntry>();
  for (const [scope, binding] of Object.entries(doc.bindings) as [Scope, Binding][]) {
    const chunk = entryText(scope, binding);
    out.set(chunk, { scope, binding, tokens: tokensOf(chunk) });
  }
  return out;
}

/**
 * The document, from the entries of a text in serializeBindings' shape: each binding's lines (a line at two spaces
 * of indent up to the next) parsed on their own the first time they are seen, and kept only when they are exactly
 * what serializeBindings writes for what they parse to. A text whose every entry is such, under serializeBindings'
 * own first lines, with no scope twice and within the file's limits, is read as the strict parse of the whole would
 * read it: each entry is a self-contained block of the one mapping. Anything else (a comment, another layout, an
 * alias, a duplicate, a text near a limit) is null, and the caller parses the whole text strictly.
 */
function parseByEntries(text: string, file: string, cache: BindingsCache): BindingsDoc | null {
  if (!text.startsWith(PREFIX) || text.length > BINDINGS_LIMITS.maxBytes || text.includes('\0')) return null;
  const body = text.slice(PREFIX.length);
  const starts: number[] = [];
  for (const m of body.matchAll(/^ {2}[^ \n]/gm)) starts.push(m.index);
  if (starts[0] !== 0 || starts.length > BINDINGS_LIMITS.maxListItems) return null;
  const known = cache.entries ?? new Map<string, CachedEntry>();
  const next = new Map<string, CachedEntry>();
  const out: BindingsDoc = { version: 1, bindings: {} };
  let tokens = 0;
  for (let i = 0; i < starts.length; i++) {
    const chunk = body.slice(starts[i], starts[i + 1] ?? body.length);
    let e = known.get(chunk) ?? next.get(chunk);
    if (e === undefined) {
      let one: BindingsDoc;
      try {
        one = parseBindingsText(PREFIX + chunk, file);
      } catch {
        return null;
      }
      const entries = Object.entries(one.bindings) as [Scope, Binding][];
      if (entries.length !== 1) return null;
      const [scope, binding] = entries[0]!;
      if (entryText(scope, binding) !== chunk) return null;
      e = { scope, binding, tokens: tokensOf(chunk) };
    }
    if (Object.prototype.hasOwnProperty.call(out.bindings, e.scope)) return null;
    tokens += e.tokens;
    // Half the budget: the entries' own counts are not the whole file's to the token.
    if (tokens > BINDINGS_LIMITS.maxTokens / 2) return null;
    out.bindings[e.scope] = e.binding;
    next.set(chunk, e);
  }
  cache.entries = next;
  return out;
}

/** Parses bindings.yaml text (the store's file, or the one `leash apply` is committing). */
export function parseBindingsText(text: string, file: string): BindingsDoc {
  let doc: unknown;
  try {
    // The strict reader: no anchors, aliases, merge keys or tags; bounded sizes.
    doc = parseStrictYaml(text, file, { uniqueKeys: true, limits: BINDINGS_LIMITS }).js;
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
  return `${HEADER}${YAML.stringify({ version: 1, bindings: sorted }, { aliasDuplicateObjects: false })}`;
}

/**
 * Writes bindings.yaml atomically. A document its reader would refuse (over BINDINGS_LIMITS) is refused here,
 * `bindings_too_large`, and nothing is written: the file the service reads stays the last good one.
 */
export function writeBindings(stateDir: string, doc: BindingsDoc): void {
  const file = bindingsFile(stateDir);
  const text = serializeBindings(doc);
  const count = Object.keys(doc.bindings).length;
  const refuse = (why: string): never => {
    throw new LeashError(
      'bindings_too_large',
      `${file} would hold ${count} bindings in ${Buffer.byteLength(text, 'utf8')} bytes: ${why}; nothing was written`,
      { file, bindings: count, limits: { ...BINDINGS_LIMITS } },
    );
  };
  if (count > BINDINGS_LIMITS.maxListItems) refuse(`at most ${BINDINGS_LIMITS.maxListItems} bindings are read back`);
  try {
    checkLimits(text, file, BINDINGS_LIMITS);
  } catch (e) {
    if (e instanceof LeashError) refuse(e.message);
    throw e;
  }
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o750 });
  atomicWriteFileSync(file, text);
}

/**
 * Checks a scope against passwd. `agent:<account>` must name an existing `leash-*` account:
 * a display name (`agent:Iris`) would bind nobody, silently, so it is refused, naming the real
 * account when one matches (case-insensitively, by its gecos name, or as `leash-<name>`).
 */
export function parseScope(raw: string, accounts: PasswdEntry[], configuredUser: string | null): Scope {
  if (raw === 'global') return 'global';
  const m = /^agent:(.+)$/.exec(raw);
  if (!m) {
    // A bare account name is the likely slip: say the scope it meant.
    const known = accounts.some((a) => a.name === raw);
    throw new LeashError(
      'scope_invalid',
      `scope ${JSON.stringify(raw)} must be global or agent:<account>` + (known ? ` (did you mean agent:${raw}?)` : ''),
      { scope: raw },
    );
  }
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
