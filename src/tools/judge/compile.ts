/**
 * Compiling a gate policy: the engine's tools surface (mode, allow, deny, ask, inspect) plus the
 * gate's own fields (argument rules, strict_args, policed_methods, deny_methods, hide_denied,
 * log_args, rules over operations), checked and indexed once, off the per-call path: judging a
 * request against the result is ./decide.ts.
 */
import { LeashError } from '../../errors.js';
import { compilePolicy, decide } from '../../engine/index.js';
import type { PolicyInput, ToolSubject, ToolsSurfacePolicy, Verdict, FailMode } from '../../engine/types.js';
import { compileLinear, LinearRegexError, type LinearRegex } from './linear-regex.js';
import {
  JSON_TYPES,
  type ArgRuleSpec,
  type ArgRulesSpec,
  type JsonTypeName,
  type ToolArgsSpec,
  type ToolsGateFields,
} from './fields.js';
import { normalizeToolName } from './names.js';
import { MAPPINGS, type MappingTable } from './operations/mappings.js';
import { compileRules, type CompiledRules } from './operations/rules.js';

export type ToolsGatePolicy = ToolsSurfacePolicy & ToolsGateFields;

/** What the gate needs from the engine: the real one (GATE_ENGINE), or a test's stand-in. */
export interface ToolsEngine {
  compilePolicy(p: PolicyInput): unknown;
  decide(surface: 'tools', subject: ToolSubject, policy: never): Verdict;
}

/** The engine functions the gate compiles against (the real engine, typed for the gate's seam). */
export const GATE_ENGINE: ToolsEngine = { compilePolicy, decide: decide as ToolsEngine['decide'] };

export interface CompiledGatePolicy {
  /** The engine the tools surface was compiled for, and its compiled form (decide.ts toolVerdict). */
  engine: ToolsEngine;
  tools: unknown;
  args: Map<string, CompiledToolArgs>;
  strictArgs: boolean;
  policed: Set<string>;
  denyMethods: { glob: string; re: { test(text: string): boolean } }[];
  hideDenied: boolean;
  logArgs: 'denied' | 'all' | 'none';
  failMode: FailMode;
  /** Rules over operations, when the policy has any (null: names and arguments only). */
  ops: CompiledOps | null;
  /** Mask secrets in what the server answers (tools.redact_output). */
  redactOutput: boolean;
  /** The audit file (tools.audit), or null. */
  audit: string | null;
  /**
   * Whether an approver's `persist` can write the tool name into tools.allow and have it decide the
   * next call: a whitelist without rules over operations (with rules, the allow list is not consulted).
   */
  persistable: boolean;
  /** Shadow mode: denials are relayed and logged as would_block (CompileOptions.shadow). */
  shadow?: boolean;
}

/** The operation layer of a compiled policy. */
export interface CompiledOps {
  rules: CompiledRules;
  workspace: string;
  home: string;
  /** A declared table (tools.mapping), null for none, 'auto' to select by the server's name. */
  mapping: MappingTable | null | 'auto';
}

/** Where relative paths and ${workspace} go, and what ~ is, for a compiled policy. */
export interface CompileOptions {
  /** Default: tools.workspace, else the process's working directory. */
  workspace?: string;
  /** Default: $HOME, else os.homedir() of the caller. */
  home?: string;
  /** Shadow mode (`enforce: shadow`): a call that would be denied is relayed and logged as would_block. */
  shadow?: boolean;
}

/** One argument rule, compiled. */
export interface CompiledArgRule {
  type: JsonTypeName | null;
  re: LinearRegex | null;
  /** The rule as written, for the log's `rule`. */
  src: string;
  /** The pattern itself spells out `\.\.` (outside a (?!...) guard): it may admit `..` segments. */
  admitsDotDot: boolean;
}
export interface CompiledArgPath {
  raw: string;
  segs: string[];
  rules: CompiledArgRule[];
}
export interface CompiledToolArgs {
  allowAny: boolean;
  allow: CompiledArgPath[];
  deny: CompiledArgPath[];
}

/** Why argument rules refuse a call (each is in the catalogue, decide.ts checks). */
export type ArgsReason = 'arg_denied' | 'arg_not_allowed' | 'args_not_object' | 'args_too_deep' | 'strict_args';
/** What the argument rules say of one call. */
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

function compileRule(spec: ArgRuleSpec, where: string): CompiledArgRule {
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

function compilePaths(spec: ArgRulesSpec, where: string, fold: boolean): CompiledArgPath[] {
  const map: Record<string, ArgRuleSpec[]> = Array.isArray(spec) ? { '**': spec } : spec;
  if (!map || typeof map !== 'object')
    throw new ArgRuleError(where, 'expected a map of argument path to rules, or a list');
  const out: CompiledArgPath[] = [];
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

/** A gate policy that does not validate (config_invalid); `problems` are `path: message` lines. */
export class GatePolicyError extends LeashError {
  constructor(readonly problems: string[]) {
    super('config_invalid', problems.join('\n'));
  }
}

/**
 * A method glob (`*` any run, `?` one character, by code point) matched without backtracking: the
 * method comes from the agent, and a regex such as `^.*a.*a.*b$` costs a power of its length. The
 * greedy wildcard walk below costs O(glob × method).
 */
export function globMatcher(glob: string): { test(text: string): boolean } {
  const p = Array.from(glob);
  return {
    test(text: string): boolean {
      const t = Array.from(text);
      let i = 0;
      let j = 0;
      let star = -1;
      let mark = 0;
      while (j < t.length) {
        if (i < p.length && p[i] !== '*' && (p[i] === '?' || p[i] === t[j])) {
          i++;
          j++;
        } else if (i < p.length && p[i] === '*') {
          star = i++;
          mark = j;
        } else if (star >= 0) {
          i = star + 1;
          j = ++mark;
        } else return false;
      }
      while (i < p.length && p[i] === '*') i++;
      return i === p.length;
    },
  };
}

const EMPTY_SURFACE = { mode: 'whitelist' as const, allow: [], deny: [] };

/**
 * Compiles a gate policy once (engine indexes, regexes, globs). Throws GatePolicyError listing
 * every problem (a bad regex, a `*` in an args key, two keys naming one tool once normalised).
 */
export function compileGatePolicy(
  tools: ToolsGatePolicy,
  failMode: FailMode,
  engine: ToolsEngine = GATE_ENGINE,
  opts: CompileOptions = {},
): CompiledGatePolicy {
  const problems: string[] = [];
  let ops: CompiledOps | null = null;
  const ruleSpecs = tools.rules ?? [];
  if (ruleSpecs.length > 0) {
    const workspace = opts.workspace ?? tools.workspace ?? process.cwd();
    const home = opts.home ?? process.env.HOME ?? '/';
    if (!workspace.startsWith('/')) problems.push(`tools.workspace: '${workspace}' is not an absolute path`);
    const m = tools.mapping ?? 'auto';
    ops = {
      rules: compileRules(ruleSpecs, tools.default ?? 'ask', { workspace, home }, problems),
      workspace,
      home,
      mapping: m === 'auto' ? 'auto' : m === 'none' ? null : (MAPPINGS.get(m) ?? null),
    };
  }
  if (tools.audit != null && !tools.audit.startsWith('/'))
    problems.push(`tools.audit: '${tools.audit}' is not an absolute path`);
  const args = new Map<string, CompiledToolArgs>();
  for (const [name, spec] of Object.entries(tools.args ?? {})) {
    const n = normalizeToolName(name);
    if (n.includes('*') || n === '') problems.push(`tools.args.${name}: an args key names exactly one tool (no '*')`);
    else if (args.has(n)) problems.push(`tools.args.${name}: names the same tool as another key once normalised`);
    try {
      args.set(n, compileToolArgs(spec, `tools.args.${name}`));
    } catch (e) {
      if (e instanceof ArgRuleError) problems.push(e.message);
      else throw e;
    }
  }
  for (const m of tools.policed_methods ?? []) {
    if (m.includes('*'))
      problems.push(`tools.policed_methods: '${m}' is not a method name (globs belong in deny_methods)`);
  }
  if (problems.length) throw new GatePolicyError(problems);
  const input: PolicyInput = {
    fail_mode: failMode,
    network: EMPTY_SURFACE,
    filesystem: EMPTY_SURFACE,
    commands: EMPTY_SURFACE,
    // With rules over operations, the operations decide what a name's absence from allow used to:
    // deny entries, inspection and argument rules still apply to every call.
    tools: {
      mode: ops ? 'blacklist' : tools.mode,
      allow: tools.allow,
      deny: tools.deny,
      ...(tools.ask ? { ask: tools.ask } : {}),
      inspect: tools.inspect,
    },
  };
  return {
    engine,
    tools: engine.compilePolicy(input),
    args,
    strictArgs: tools.strict_args ?? false,
    policed: new Set(['tools/call', ...(tools.policed_methods ?? []).map(normalizeToolName)]),
    denyMethods: (tools.deny_methods ?? []).map((g) => ({ glob: g, re: globMatcher(normalizeToolName(g)) })),
    hideDenied: tools.hide_denied ?? false,
    logArgs: tools.log_args ?? 'denied',
    failMode,
    ops,
    redactOutput: tools.redact_output ?? true,
    audit: tools.audit ?? null,
    persistable: ops === null && tools.mode === 'whitelist',
    shadow: opts.shadow === true,
  };
}
