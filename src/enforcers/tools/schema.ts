/**
 * The YAML shape of the tools gate (a fragment: the config schema owner merges `toolsGateFields`
 * into its `tools` section), and the loader of a `leash mcp --policy FILE`.
 */
import { z } from 'zod';
import { parseStrictYaml, readPolicyFile, strictProblems } from '../../config/strict-yaml.js';
import { toolEntryProblem } from '../../engine/tool.js';
import type { FailMode } from '../../engine/types.js';
import { LeashError } from '../../errors.js';
import { GATE_DEFAULTS, GatePolicyError, type ToolsGatePolicy } from './policy.js';

const ruleSpec = z.union([
  z.string().describe('a regex, matched anywhere in the value (anchor with ^ and $; $ is the end of the value)'),
  z
    .strictObject({
      type: z.enum(['string', 'number', 'boolean', 'null', 'object', 'array']).optional(),
      pattern: z.string().optional(),
    })
    .describe('a typed rule: admits only values of that JSON type (and matching pattern, when given)'),
]);
const rulesSpec = z.union([
  z.array(ruleSpec).describe('shorthand for {"**": [...]}: every value anywhere'),
  z.record(z.string(), z.array(ruleSpec)).describe('argument path (a.b, *, **) → rules'),
]);

/**
 * The fields the gate adds to the config's `tools` section, without defaults: the config schema
 * (src/config/schema.ts) wraps each with its own `opt(spec, GATE_DEFAULTS[key])`, so a profile
 * (fragment) carries only what it sets and the full config gets the gate's defaults.
 */
export const toolsGateSpecs = {
  args: z
    .record(
      z.string(),
      z.strictObject({
        allow: z.union([z.literal('*'), rulesSpec]).optional(),
        deny: rulesSpec.optional(),
      }),
    )
    .describe(
      'per-tool argument rules by argument path; deny is checked against every nested value, allow must match the exact shape',
    ),
  strict_args: z
    .boolean()
    .describe('a tool without allow rules accepts only empty arguments ({}), so a bare tool stays bare'),
  policed_methods: z
    .array(z.string().min(1))
    .describe('JSON-RPC methods whose selector (name/uri/ref) goes through the tool policy; tools/call always does'),
  deny_methods: z
    .array(z.string().min(1))
    .describe(
      'JSON-RPC methods refused outright with -32601 (globs, case-insensitive); matching notifications are dropped',
    ),
  hide_denied: z
    .boolean()
    .describe('strip tools denied by name from every tools/list page, so the agent never sees them'),
  log_args: z
    .enum(['denied', 'all', 'none'])
    .describe(
      'which calls carry argument values in the decision log; allowed calls carry secrets, so "denied" by default',
    ),
};

/** The gate's fields with the gate's defaults (a `leash mcp --policy FILE`). */
export const toolsGateFields = {
  args: toolsGateSpecs.args.default(() => structuredClone(GATE_DEFAULTS.args)),
  strict_args: toolsGateSpecs.strict_args.default(GATE_DEFAULTS.strict_args),
  policed_methods: toolsGateSpecs.policed_methods.default(() => structuredClone(GATE_DEFAULTS.policed_methods)),
  deny_methods: toolsGateSpecs.deny_methods.default(() => structuredClone(GATE_DEFAULTS.deny_methods)),
  hide_denied: toolsGateSpecs.hide_denied.default(GATE_DEFAULTS.hide_denied),
  log_args: toolsGateSpecs.log_args.default(GATE_DEFAULTS.log_args),
};

const inspectAction = z.enum(['block', 'log', 'allow']);

/** A `leash mcp --policy FILE`: a leash.yaml (or a fragment) with a tools section. */
export const gatePolicyFileSchema = z.strictObject({
  fail_mode: z.enum(['closed', 'open']).catch('closed').default('closed'),
  tools: z.strictObject({
    mode: z.enum(['whitelist', 'blacklist']).default('whitelist'),
    allow: z.array(z.string().min(1)).default([]),
    deny: z.array(z.string().min(1)).default([]),
    inspect: z
      .strictObject({
        secrets: inspectAction.default('block'),
        pii: inspectAction.default('log'),
        priv_esc: inspectAction.default('block'),
      })
      .default({ secrets: 'block', pii: 'log', priv_esc: 'block' }),
    ...toolsGateFields,
  }),
  logging: z.object({ decisions: z.string().optional() }).loose().optional(),
  // A whole leash.yaml is a policy file too: its other sections are accepted and not read here.
  user: z.unknown().optional(),
  network: z.unknown().optional(),
  filesystem: z.unknown().optional(),
  commands: z.unknown().optional(),
  enforcers: z.unknown().optional(),
  // Notes (learn writes them); never read.
  _comment: z.unknown().optional(),
  _not_called: z.unknown().optional(),
});

const KNOWN = [
  'mode',
  'allow',
  'deny',
  'inspect',
  ...Object.keys(toolsGateFields),
  'secrets',
  'pii',
  'priv_esc',
  'type',
  'pattern',
];

function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++)
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length]![b.length]!;
}

function suggest(key: string): string {
  let best: string | null = null;
  let bd = 3;
  for (const k of KNOWN) {
    const dd = distance(key, k);
    if (dd < bd) {
      bd = dd;
      best = k;
    }
  }
  return best ? ` (did you mean '${best}'?)` : '';
}

export interface LoadedGatePolicy {
  tools: ToolsGatePolicy;
  failMode: FailMode;
  decisions: string | null;
}

/** Validates an already-parsed policy document; throws GatePolicyError with `path: message` lines. */
export function validateGatePolicy(doc: unknown): LoadedGatePolicy {
  const r = gatePolicyFileSchema.safeParse(doc);
  if (!r.success) {
    const lines: string[] = [];
    for (const issue of r.error.issues) {
      const at = issue.path.join('.') || '(top)';
      if (issue.code === 'unrecognized_keys') {
        for (const k of issue.keys) lines.push(`${at}: unknown key '${k}'${suggest(k)}`);
      } else lines.push(`${at}: ${issue.message}`);
    }
    throw new GatePolicyError(lines);
  }
  const t = r.data.tools;
  // An entry that can never match (a `*`, which is no wildcard for tool names) is refused: the
  // gate's policy file has no validate run to report it, and a deny `*` would block nothing.
  const inert: string[] = [];
  for (const list of ['allow', 'deny'] as const)
    t[list].forEach((e, i) => {
      const p = toolEntryProblem(e);
      if (p) inert.push(`tools.${list}.${i}: ${p.message} (${JSON.stringify(e)}) [entry_inert]`);
    });
  if (inert.length) throw new GatePolicyError(inert);
  return {
    tools: { ...GATE_DEFAULTS, ...t } as ToolsGatePolicy,
    failMode: r.data.fail_mode,
    decisions: r.data.logging?.decisions ?? null,
  };
}

/**
 * Reads a policy file (YAML or JSON). A missing file, a directory, a duplicate key, an unknown key
 * or a bad value is a GatePolicyError: the gate exits 2 and never starts the server.
 */
export function loadGatePolicyFile(file: string): LoadedGatePolicy {
  // The strict reader (src/config/strict-yaml.ts): no anchors, aliases, merge keys or tags, UTF-8,
  // bounded sizes; uniqueKeys makes a duplicate key an error instead of "the last one wins".
  let js: unknown;
  try {
    js = parseStrictYaml(readPolicyFile(file), file, { uniqueKeys: true }).js;
  } catch (e) {
    if (e instanceof LeashError) throw new GatePolicyError(strictProblems(e, file));
    throw e;
  }
  return validateGatePolicy(js);
}
