/**
 * The tools gate's fields of the config's `tools` section, as data: the zod shape (without
 * defaults, so a profile carries only what it sets), the gate's defaults, the shape of a
 * `leash mcp --policy FILE`, and the types, inferred from the schema. The gate
 * (src/tools/) reads these; what a rule means is its business, not the config's.
 */
import { z } from 'zod';

export type JsonTypeName = 'string' | 'number' | 'boolean' | 'null' | 'object' | 'array';
export const JSON_TYPES: readonly JsonTypeName[] = ['string', 'number', 'boolean', 'null', 'object', 'array'];

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
const toolArgsSpec = z.strictObject({
  allow: z.union([z.literal('*'), rulesSpec]).optional(),
  deny: rulesSpec.optional(),
});

const operationRule = z.strictObject({
  id: z.string().min(1).describe('a name for the rule, unique in the policy (the log and explain cite it)'),
  effect: z.enum(['allow', 'deny', 'ask']).describe('what a call matching every field the rule sets gets'),
  operations: z
    .array(z.string().min(1))
    .min(1)
    .optional()
    .describe(
      'fs.read, fs.write, fs.delete, shell.exec, git.read, git.write, git.remote, net.request, db.read, db.write, unknown; fs.* and * allowed',
    ),
  resources: z
    .array(z.string().min(1))
    .min(1)
    .optional()
    .describe('absolute path globs (${workspace}, ${home}, ~), each covering what is below it'),
  commands: z
    .array(z.array(z.string()).min(1))
    .min(1)
    .optional()
    .describe('exact argv patterns: * is one argument, a final ** the rest'),
  hosts: z.array(z.string().min(1)).min(1).optional().describe('hosts of net.request: exact, *.domain (below it) or *'),
  methods: z.array(z.string().min(1)).min(1).optional().describe('HTTP methods of net.request'),
});

/** One rule over operations as written. */
export type OperationRuleSpec = z.output<typeof operationRule>;

/** A rule as written: a regex, or a typed rule admitting only values of that JSON type. */
export type ArgRuleSpec = z.output<typeof ruleSpec>;
/** Path → rules. A plain list is shorthand for `{ "**": list }`. */
export type ArgRulesSpec = z.output<typeof rulesSpec>;
/** One tool's argument rules. `allow: "*"` admits any arguments (deny rules still apply). */
export type ToolArgsSpec = z.output<typeof toolArgsSpec>;

/**
 * The fields the gate adds to the config's `tools` section, without defaults: the config schema
 * (src/control/config/schema.ts) wraps each with its own `opt(spec, GATE_DEFAULTS[key])`, so a profile
 * (fragment) carries only what it sets and the full config gets the gate's defaults.
 */
export const toolsGateSpecs = {
  args: z
    .record(z.string(), toolArgsSpec)
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
  rules: z
    .array(operationRule)
    .describe(
      'rules over operations: every matching deny wins, else the first matching rule, else tools.default (docs/tools.md)',
    ),
  default: z
    .enum(['allow', 'deny', 'ask'])
    .describe('what a tool call no operation rule matches gets (unknown and ambiguous calls never get allow)'),
  workspace: z
    .string()
    .min(1)
    .nullable()
    .describe(
      "the directory relative paths are resolved against and ${workspace} names (null: the gate's working directory)",
    ),
  mapping: z
    .enum(['auto', 'none', 'filesystem', 'git', 'fetch', 'terminal', 'github', 'sqlite', 'postgres'])
    .describe("which built-in mapping table reads the server's calls (auto: by the server's serverInfo.name)"),
  redact_output: z
    .boolean()
    .describe('mask secrets in tool results, structured content and errors before the client sees them'),
  audit: z
    .string()
    .min(1)
    .nullable()
    .describe(
      'an absolute path: one JSON line per tool call (tool, operation, resources, decision, rule, result SHA-256)',
    ),
  log_args: z
    .enum(['denied', 'all', 'none'])
    .describe(
      'which calls carry argument values in the decision log; allowed calls carry secrets, so "denied" by default',
    ),
};

/**
 * The gate's extension of the config's `tools` section (all optional in YAML): per-tool argument
 * rules keyed by tool name (compared normalised), strict_args (a tool without allow rules accepts
 * only empty arguments), policed_methods (whose selector goes through the tool policy; tools/call
 * always does), deny_methods (refused outright, globs, case-insensitive), hide_denied (strip tools
 * denied by name from tools/list), log_args (which calls carry their argument values in the log).
 */
export type ToolsGateFields = z.output<z.ZodObject<typeof toolsGateSpecs>>;

export const GATE_DEFAULTS: ToolsGateFields = {
  args: {},
  strict_args: false,
  policed_methods: ['tools/call'],
  deny_methods: [],
  hide_denied: false,
  log_args: 'denied',
  rules: [],
  default: 'ask',
  workspace: null,
  mapping: 'auto',
  redact_output: true,
  audit: null,
};

/** The gate's fields with the gate's defaults (a `leash mcp --policy FILE`). */
export const toolsGateFields = {
  args: toolsGateSpecs.args.default(() => structuredClone(GATE_DEFAULTS.args)),
  strict_args: toolsGateSpecs.strict_args.default(GATE_DEFAULTS.strict_args),
  policed_methods: toolsGateSpecs.policed_methods.default(() => structuredClone(GATE_DEFAULTS.policed_methods)),
  deny_methods: toolsGateSpecs.deny_methods.default(() => structuredClone(GATE_DEFAULTS.deny_methods)),
  hide_denied: toolsGateSpecs.hide_denied.default(GATE_DEFAULTS.hide_denied),
  log_args: toolsGateSpecs.log_args.default(GATE_DEFAULTS.log_args),
  rules: toolsGateSpecs.rules.default(() => []),
  default: toolsGateSpecs.default.default(GATE_DEFAULTS.default),
  workspace: toolsGateSpecs.workspace.default(GATE_DEFAULTS.workspace),
  mapping: toolsGateSpecs.mapping.default(GATE_DEFAULTS.mapping),
  redact_output: toolsGateSpecs.redact_output.default(GATE_DEFAULTS.redact_output),
  audit: toolsGateSpecs.audit.default(GATE_DEFAULTS.audit),
};

const inspectAction = z.enum(['block', 'log', 'allow']);

/** A `leash mcp --policy FILE`: a leash.yaml (or a fragment) with a tools section. */
export const gatePolicyFileSchema = z.strictObject({
  fail_mode: z.enum(['closed', 'open']).catch('closed').default('closed'),
  tools: z.strictObject({
    mode: z.enum(['whitelist', 'blacklist']).default('whitelist'),
    allow: z.array(z.string().min(1)).default([]),
    deny: z.array(z.string().min(1)).default([]),
    ask: z.array(z.string().min(1)).default([]),
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
