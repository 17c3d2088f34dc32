/**
 * Argument rules for the tools surface (pure): rules keyed by argument path, deny checked against
 * every nested value, allow matching the exact shape, `..` never admitted by accident.
 */
import { LeashError } from '../../errors.js';
import { compileLinear, LinearRegexError, type LinearRegex } from './linear-regex.js';
import { JsonNumber, isObject, jsonType, stringifyAscii, type JsonValue } from '../../formats/json.js';
// The rules as written are the config's data (src/tools/judge/fields.ts); this file compiles and applies them.
import { JSON_TYPES, type ArgRuleSpec, type ArgRulesSpec, type JsonTypeName, type ToolArgsSpec } from './fields.js';

interface CompiledRule {
  type: JsonTypeName | null;
  re: LinearRegex | null;
  /** The rule as written, for the log's `rule`. */
  src: string;
  /** The pattern itself spells out `\.\.` (outside a (?!...) guard): it may admit `..` segments. */
  admitsDotDot: boolean;
}
interface CompiledPath {
  raw: string;
  segs: string[];
  rules: CompiledRule[];
}
export interface CompiledToolArgs {
  allowAny: boolean;
  allow: CompiledPath[];
  deny: CompiledPath[];
}

export type ArgsReason = 'arg_denied' | 'arg_not_allowed' | 'args_not_object' | 'args_too_deep' | 'strict_args';
export type ArgsVerdict = { ok: true } | { ok: false; reason: ArgsReason; rule: string | null; at: string };

/** Arguments nested deeper than this are denied outright. */
export const MAX_ARG_DEPTH = 100;

/** Thrown for a rule that cannot be read unambiguously; `path` says where in the policy. */
export class ArgRuleError extends LeashError {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super('config_invalid', `${path}: ${message}`);
  }
}

/** Removes (?!...) groups, so a traversal guard does not count as spelling out `\.\.`. */
function withoutNegativeLookaheads(p: string): string {
  let out = '';
  for (let k = 0; k < p.length; k++) {
    if (p[k] === '\\') {
      out += p.slice(k, k + 2);
      k++;
      continue;
    }
    if (p.startsWith('(?!', k)) {
      let depth = 0;
      for (; k < p.length; k++) {
        if (p[k] === '\\') {
          k++;
          continue;
        }
        if (p[k] === '(') depth++;
        else if (p[k] === ')' && --depth === 0) break;
      }
      continue;
    }
    out += p[k];
  }
  return out;
}

function compileRule(spec: ArgRuleSpec, where: string): CompiledRule {
  let type: JsonTypeName | null = null;
  let pattern: string | null;
  if (typeof spec === 'string') pattern = spec;
  else if (spec && typeof spec === 'object' && !Array.isArray(spec)) {
    for (const k of Object.keys(spec)) {
      if (k !== 'type' && k !== 'pattern')
        throw new ArgRuleError(where, `unknown key '${k}' (a typed rule takes type and pattern)`);
    }
    if (spec.type !== undefined) {
      if (!JSON_TYPES.includes(spec.type))
        throw new ArgRuleError(where, `type must be one of ${JSON_TYPES.join(', ')}`);
      type = spec.type;
    }
    if (spec.pattern !== undefined && typeof spec.pattern !== 'string')
      throw new ArgRuleError(where, 'pattern must be a string');
    pattern = spec.pattern ?? null;
    if (type === null && pattern === null) throw new ArgRuleError(where, 'a typed rule needs a type or a pattern');
  } else throw new ArgRuleError(where, 'a rule is a regex string or {type, pattern}');
  let re: LinearRegex | null = null;
  let admitsDotDot = false;
  if (pattern !== null) {
    try {
      // Linear in the input (RE2 semantics): `$` is the end of the value, never "before a trailing newline".
      re = compileLinear(pattern);
    } catch (e) {
      if (!(e instanceof LinearRegexError)) throw e;
      throw new ArgRuleError(where, `bad regex: ${e.message}`);
    }
    admitsDotDot = withoutNegativeLookaheads(pattern).includes('\\.\\.');
  }
  return { type, re, src: typeof spec === 'string' ? spec : JSON.stringify(spec), admitsDotDot };
}

function compilePaths(spec: ArgRulesSpec, where: string, fold: boolean): CompiledPath[] {
  const map: Record<string, ArgRuleSpec[]> = Array.isArray(spec) ? { '**': spec } : spec;
  if (!map || typeof map !== 'object')
    throw new ArgRuleError(where, 'expected a map of argument path to rules, or a list');
  const out: CompiledPath[] = [];
  for (const [raw, rules] of Object.entries(map)) {
    const segs = raw === '' ? ['**'] : raw.split('.');
    if (segs.some((s) => s === '')) throw new ArgRuleError(`${where}.${raw}`, 'empty path segment');
    if (!Array.isArray(rules)) throw new ArgRuleError(`${where}.${raw}`, 'rules must be a list');
    out.push({
      raw,
      segs: fold ? segs.map((s) => s.toLowerCase()) : segs,
      rules: rules.map((r, k) => compileRule(r, `${where}.${raw}[${k}]`)),
    });
  }
  return out;
}

/** Compiles one tool's argument rules; throws ArgRuleError on anything unreadable. */
export function compileToolArgs(spec: ToolArgsSpec, where = 'args'): CompiledToolArgs {
  if (!spec || typeof spec !== 'object' || Array.isArray(spec)) throw new ArgRuleError(where, 'expected {allow, deny}');
  for (const k of Object.keys(spec)) {
    if (k !== 'allow' && k !== 'deny') throw new ArgRuleError(where, `unknown key '${k}' (takes only allow and deny)`);
  }
  const allowAny = spec.allow === '*';
  return {
    allowAny,
    allow:
      spec.allow === undefined || allowAny ? [] : compilePaths(spec.allow as ArgRulesSpec, `${where}.allow`, false),
    deny: spec.deny === undefined ? [] : compilePaths(spec.deny, `${where}.deny`, true),
  };
}

/**
 * Matches glob segments (`*` one, `**` any number) against a concrete path, exactly; `len` cuts
 * the path to its first `len` segments (a prefix, without copying it).
 */
function segsMatch(pat: string[], pi: number, path: string[], ti: number, len = path.length): boolean {
  if (pi === pat.length) return ti === len;
  const p = pat[pi]!;
  if (p === '**') {
    for (let k = ti; k <= len; k++) if (segsMatch(pat, pi + 1, path, k, len)) return true;
    return false;
  }
  if (ti === len) return false;
  return (p === '*' || p === path[ti]) && segsMatch(pat, pi + 1, path, ti + 1, len);
}

/** True when the pattern matches the path or any prefix of it (a deny rule covers everything below). */
function segsMatchPrefix(pat: string[], path: string[]): boolean {
  for (let k = 0; k <= path.length; k++) if (segsMatch(pat, 0, path, 0, k)) return true;
  return false;
}

interface Leaf {
  path: string[];
  value: JsonValue;
  text: string;
  /** A space-joined array of scalars: checked by deny rules only. */
  joined?: boolean;
}

function scalarText(v: JsonValue): string {
  if (typeof v === 'string') return v;
  if (v instanceof JsonNumber) return v.text;
  return stringifyAscii(v);
}

function isScalar(v: JsonValue): boolean {
  return v === null || typeof v !== 'object' || v instanceof JsonNumber;
}

/** Every value in the arguments (scalars and empty containers), with its path; null when too deep. */
function leaves(v: JsonValue, path: string[], out: Leaf[], depth: number): boolean {
  if (depth > MAX_ARG_DEPTH) return false;
  if (Array.isArray(v)) {
    if (v.length === 0) {
      out.push({ path, value: v, text: '[]' });
      return true;
    }
    if (v.every(isScalar)) out.push({ path, value: v, text: v.map(scalarText).join(' '), joined: true });
    for (let k = 0; k < v.length; k++) if (!leaves(v[k]!, [...path, String(k)], out, depth + 1)) return false;
    return true;
  }
  if (isObject(v)) {
    const keys = Object.keys(v);
    if (keys.length === 0) {
      out.push({ path, value: v, text: '{}' });
      return true;
    }
    for (const k of keys) if (!leaves(v[k]!, [...path, k], out, depth + 1)) return false;
    return true;
  }
  out.push({ path, value: v, text: scalarText(v) });
  return true;
}

const DOTDOT = /(?:^|[/\\])\.\.(?:[/\\]|$)/;

function ruleMatches(r: CompiledRule, leaf: Leaf, forAllow: boolean): boolean {
  if (r.type !== null && !leaf.joined && jsonType(leaf.value) !== r.type) return false;
  if (r.type !== null && leaf.joined && r.type !== 'string') return false;
  if (r.re && !r.re.test(leaf.text)) return false;
  if (forAllow && !r.admitsDotDot && DOTDOT.test(leaf.text)) return false;
  return true;
}

const atOf = (path: string[]): string => (path.length ? path.join('.') : '(arguments)');

/**
 * Judges one call's arguments against a tool's compiled rules.
 * `args` undefined means the call carried none (treated as `{}`); a non-object is refused.
 * Deny is checked first against every value and every space-joined array of scalars; then, when
 * the tool has allow rules, every value must be admitted by a rule at exactly its path;
 * with no allow rules and `strictArgs`, only empty arguments pass.
 */
export function checkArgs(
  args: JsonValue | undefined,
  rules: CompiledToolArgs | null,
  strictArgs: boolean,
): ArgsVerdict {
  if (args === undefined) args = Object.create(null) as JsonValue;
  if (!isObject(args)) return { ok: false, reason: 'args_not_object', rule: null, at: '(arguments)' };
  let hasKeys = false;
  for (const _ in args) {
    hasKeys = true;
    break;
  }
  if (!rules || (rules.deny.length === 0 && (rules.allowAny || rules.allow.length === 0))) {
    // No rule reads a value: only the depth limit and strict_args apply.
    if (hasKeys && !leaves(args, [], [], 0))
      return { ok: false, reason: 'args_too_deep', rule: null, at: '(arguments)' };
    if (rules?.allowAny) return { ok: true };
    if (strictArgs && hasKeys) return { ok: false, reason: 'strict_args', rule: null, at: '(arguments)' };
    return { ok: true };
  }
  const all: Leaf[] = [];
  if (hasKeys && !leaves(args, [], all, 0))
    return { ok: false, reason: 'args_too_deep', rule: null, at: '(arguments)' };
  // Plain loops (no closures): this runs on every policed call.
  for (let li = 0; li < all.length && rules.deny.length > 0; li++) {
    const leaf = all[li]!;
    // Deny paths match case-insensitively; most argument names are lower case already.
    let folded = leaf.path;
    for (let k = 0; k < folded.length; k++) {
      if (folded[k] !== folded[k]!.toLowerCase()) {
        folded = leaf.path.map((seg) => seg.toLowerCase());
        break;
      }
    }
    for (const p of rules.deny) {
      if (!segsMatchPrefix(p.segs, folded)) continue;
      for (const r of p.rules) {
        if (r.type !== null && jsonType(leaf.value) !== r.type && !(leaf.joined && r.type === 'string')) continue;
        if (r.re ? r.re.test(leaf.text) : true)
          return { ok: false, reason: 'arg_denied', rule: `${p.raw}: ${r.src}`, at: atOf(leaf.path) };
      }
    }
  }
  if (rules.allowAny) return { ok: true };
  if (rules.allow.length === 0) {
    if (strictArgs && hasKeys) return { ok: false, reason: 'strict_args', rule: null, at: '(arguments)' };
    return { ok: true };
  }
  for (let li = 0; li < all.length; li++) {
    const leaf = all[li]!;
    if (leaf.joined) continue;
    let admitted = false;
    for (let pi = 0; pi < rules.allow.length && !admitted; pi++) {
      const p = rules.allow[pi]!;
      if (!segsMatch(p.segs, 0, leaf.path, 0)) continue;
      for (let ri = 0; ri < p.rules.length; ri++) {
        if (ruleMatches(p.rules[ri]!, leaf, true)) {
          admitted = true;
          break;
        }
      }
    }
    if (!admitted) return { ok: false, reason: 'arg_not_allowed', rule: null, at: atOf(leaf.path) };
  }
  return { ok: true };
}
