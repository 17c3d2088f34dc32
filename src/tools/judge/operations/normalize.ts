/**
 * The normaliser: a tool call becomes one action — an operation and its resources (paths, command
 * argvs, hosts, methods) — through the server's mapping table (./mappings.ts). What the table does
 * not know, or an argument of the wrong shape, is `unknown`; a command whose effect cannot be
 * read from its argv is marked `ambiguous`. Neither ever inherits a default allow (./rules.ts).
 */
import path from 'node:path';
import { isObject, type JsonValue } from '../../../formats/json.js';
import { parseCommandLine } from '../../terminal/parse.js';
import { gitOperation } from './git.js';
import type { ListingKind } from './listing.js';
import type { MappingTable, Operation } from './mappings.js';
import { danglingTarget, resolvePath, type PathContext } from './paths.js';
import { classifySql } from './sql.js';

export interface Action {
  tool: string;
  /** The mapping table that read the call (`filesystem@1`), or null. */
  mapping: string | null;
  operation: Operation;
  paths: string[];
  commands: string[][];
  hosts: string[];
  methods: string[];
  /** The operation could not be read for sure (a shell string, an ambiguous git command). */
  ambiguous: boolean;
  /** Why the action is unknown or ambiguous (for explain and the log). */
  why?: string;
  /** The answer lists entries below the path (./listing.ts): they are judged as reads of their own. */
  listing?: ListingKind;
}

/** An action whose operation is unknown (it names no path, command or host). */
export const unknownAction = (tool: string, mapping: string | null, why: string): Action => ({
  tool,
  mapping,
  operation: 'unknown',
  paths: [],
  commands: [],
  hosts: [],
  methods: [],
  ambiguous: false,
  why,
});

/** The host of a URL as rules compare it: lower case, no trailing dot, IPv6 without brackets. */
function hostOf(u: URL): string {
  let h = u.hostname.toLowerCase();
  if (h.endsWith('.')) h = h.slice(0, -1);
  if (h.startsWith('[') && h.endsWith(']')) h = h.slice(1, -1);
  return h;
}

export function normalizeCall(
  tool: string,
  args: JsonValue | undefined,
  table: MappingTable | null,
  ctx: PathContext,
): Action {
  if (table === null) return unknownAction(tool, null, 'no mapping table for this server');
  const mapping = `${table.id}@${table.version}`;
  const m = Object.prototype.hasOwnProperty.call(table.tools, tool) ? table.tools[tool] : undefined;
  if (m === undefined) return unknownAction(tool, mapping, `tool not in the ${table.id} table`);
  const a = args === undefined ? {} : args;
  if (!isObject(a)) return unknownAction(tool, mapping, 'arguments are not an object');
  const str = (k: string): string | null | undefined => {
    if (!Object.prototype.hasOwnProperty.call(a, k)) return undefined;
    const v = a[k];
    return typeof v === 'string' ? v : null;
  };
  const act: Action = {
    tool,
    mapping,
    operation: m.operation,
    paths: [],
    commands: [],
    hosts: [],
    methods: [],
    ambiguous: false,
  };
  if (m.listing !== undefined) act.listing = m.listing;
  // A relative path lands where the server's model says (./model.ts), under every reading the
  // server may be in; a base it cannot know makes the call unknown (null).
  const model = ctx.model ?? null;
  const relUnknown = 'a relative path whose base the model of this server cannot know';
  const bases = (p: string, base: string[] | null): string[] | null => {
    if (p.startsWith('/') || p === '~' || p.startsWith('~/')) return [p];
    if (base !== null) return base.map((b) => `${b}/${p}`);
    return model === null ? null : model.resolveRelative(table, p);
  };
  const add = (p: string, base: string[] | null): boolean | null => {
    if (p.length === 0 || p.includes('\0')) return false;
    const raws = bases(p, base);
    if (raws === null) return null;
    for (const raw of raws) {
      const r = resolvePath(raw, '/', ctx, table.unicode_equivalent === true);
      if (r === null) return false;
      for (const x of r) if (!act.paths.includes(x)) act.paths.push(x);
    }
    return true;
  };
  for (const spec of m.paths ?? []) {
    let base: string[] | null = null;
    if (spec.base !== undefined) {
      const b = str(spec.base);
      if (typeof b !== 'string')
        return unknownAction(tool, mapping, `argument ${spec.base} is missing or not a string`);
      const raws = b.length === 0 || b.includes('\0') ? [] : bases(b, null);
      if (raws === null) return unknownAction(tool, mapping, relUnknown);
      base = raws.flatMap((raw) => resolvePath(raw, '/', ctx) ?? []);
      if (base.length === 0) return unknownAction(tool, mapping, `argument ${spec.base} is not a path`);
    }
    const v = Object.prototype.hasOwnProperty.call(a, spec.arg) ? a[spec.arg] : undefined;
    if (spec.array) {
      if (!Array.isArray(v) || v.length === 0)
        return unknownAction(tool, mapping, `argument ${spec.arg} is not a non-empty array of paths`);
      for (const el of v) {
        const ok = typeof el === 'string' ? add(el, base) : false;
        if (ok === null) return unknownAction(tool, mapping, relUnknown);
        if (!ok) return unknownAction(tool, mapping, `argument ${spec.arg} holds something that is not a path`);
      }
    } else {
      const ok = typeof v === 'string' ? add(v, base) : false;
      if (ok === null) return unknownAction(tool, mapping, relUnknown);
      if (!ok) return unknownAction(tool, mapping, `argument ${spec.arg} is missing or not a path`);
    }
  }
  // A write through a symlink that points nowhere creates its target: judged there too.
  if (act.operation === 'fs.write' || act.operation === 'fs.delete')
    for (let i = 0; i < act.paths.length && i < 32; i++) {
      const t = danglingTarget(act.paths[i]!);
      if (t === null) continue;
      for (const x of resolvePath(t, '/', ctx) ?? []) if (!act.paths.includes(x)) act.paths.push(x);
    }
  if (m.url !== undefined) {
    const u = str(m.url.arg);
    if (typeof u !== 'string') return unknownAction(tool, mapping, `argument ${m.url.arg} is missing or not a string`);
    let url: URL;
    try {
      url = new URL(u);
    } catch {
      return unknownAction(tool, mapping, 'invalid URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      return unknownAction(tool, mapping, 'not an http(s) URL');
    act.hosts.push(hostOf(url));
    act.methods.push((m.method ?? 'GET').toUpperCase());
  }
  if (m.host !== undefined) {
    act.hosts.push(m.host);
    act.methods.push((m.method ?? 'GET').toUpperCase());
  }
  if (m.sql !== undefined) {
    const q = str(m.sql.arg);
    if (typeof q !== 'string') return unknownAction(tool, mapping, `argument ${m.sql.arg} is missing or not a string`);
    const c = classifySql(q);
    // A tool declared as a write stays a write whatever its text says; a read tool whose text
    // writes is a write (the server may refuse it, the policy judges it as what it asks for).
    if (m.operation !== 'db.write') act.operation = c.operation;
    if (c.ambiguous) {
      act.ambiguous = true;
      act.why = c.why ?? 'SQL whose effect cannot be read from its text';
    }
  }
  if (m.command !== undefined) {
    const line = str(m.command.arg);
    if (typeof line !== 'string')
      return unknownAction(tool, mapping, `argument ${m.command.arg} is missing or not a string`);
    if (m.command.cwd !== undefined) {
      const c = str(m.command.cwd);
      if (c === null) return unknownAction(tool, mapping, `argument ${m.command.cwd} is not a string`);
      const ok = c === undefined ? true : add(c, null);
      if (ok === null) return unknownAction(tool, mapping, relUnknown);
      if (!ok) return unknownAction(tool, mapping, `argument ${m.command.cwd} is not a path`);
    }
    // No cwd: the command runs where the server's base is (leash terminal: its jail root).
    if (act.paths.length === 0 && add('.', null) !== true) return unknownAction(tool, mapping, relUnknown);
    // A compound or quoted command line is never taken as a safe argv: it is ambiguous, with no
    // argv a commands rule could match (a rule without commands can still authorise it).
    if (/["'\\]/.test(line)) {
      act.operation = 'shell.exec';
      act.ambiguous = true;
      act.why = 'a quoted or escaped command line';
      return act;
    }
    // leash terminal's own parser: exactly the argv the terminal would run (it has no shell). A
    // line it refuses (metacharacters, control characters) has no argv: ambiguous.
    const parsed = parseCommandLine(line);
    if (!parsed.ok || parsed.argv.length === 0) {
      act.operation = 'shell.exec';
      act.ambiguous = true;
      act.why = parsed.ok ? 'empty command' : parsed.reason;
      return act;
    }
    act.commands.push(parsed.argv);
    if (path.basename(parsed.argv[0]!) === 'git') {
      const g = gitOperation(parsed.argv);
      if (g === null) {
        act.operation = 'shell.exec';
        act.ambiguous = true;
        act.why = 'a git command whose effect cannot be read from its argv';
      } else act.operation = g;
    }
  }
  return act;
}
