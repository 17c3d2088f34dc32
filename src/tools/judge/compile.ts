/**
 * Compiling a gate policy: the engine's tools surface (mode, allow, deny, ask, inspect) plus the
 * gate's own fields (argument rules, strict_args, policed_methods, deny_methods, hide_denied,
 * log_args, rules over operations), checked and indexed once. Judging a request against the
 * result is ./decide.ts.
 */
import { LeashError } from '../../errors.js';
import { compilePolicy, decide } from '../../engine/index.js';
import type { PolicyInput, ToolSubject, ToolsSurfacePolicy, Verdict, FailMode } from '../../engine/types.js';
import { ArgRuleError, compileToolArgs, type CompiledToolArgs } from './args.js';
import type { ToolsGateFields } from './fields.js';
import { asPlain, type JsonValue } from '../../formats/json.js';
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
  /** The engine's verdict for a tool name (+ inputs, for inspection). */
  decideTool(name: string, inputs: unknown): Verdict;
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
  const compiled = engine.compilePolicy(input) as never;
  return {
    // The engine inspects plain values: floats and big integers are handed over as doubles (the
    // engine only reads its subject, so inputs without either are handed over as they are).
    decideTool: (name, inputs) =>
      engine.decide(
        'tools',
        { name, inputs: inputs === undefined ? undefined : asPlain(inputs as JsonValue) },
        compiled,
      ),
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
