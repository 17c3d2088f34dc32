/**
 * The loader of a `leash mcp --policy FILE`: the shape is the config's (src/tools/judge/fields.ts,
 * gatePolicyFileSchema); this file reads the file strictly and says what is wrong, line by line.
 */
import { GATE_DEFAULTS, gatePolicyFileSchema, toolsGateFields } from './fields.js';
import { parseStrictYaml, readPolicyFile, strictProblems } from '../../formats/yaml.js';
import { toolEntryProblem } from '../../engine/tool.js';
import type { FailMode } from '../../engine/types.js';
import { LeashError } from '../../errors.js';
import { GatePolicyError, type ToolsGatePolicy } from './policy.js';

const KNOWN = [
  'mode',
  'allow',
  'deny',
  'ask',
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
  for (const list of ['allow', 'deny', 'ask'] as const)
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
  // The strict reader (src/formats/yaml.ts): no anchors, aliases, merge keys or tags, UTF-8,
  // bounded sizes; uniqueKeys makes a duplicate key an error instead of "the last one wins".
  let js: unknown;
  try {
    js = parseStrictYaml(
      readPolicyFile(file, {
        what: 'tools policy',
        hint: 'make one with: leash tools policy init --recipe NAME --policy FILE',
      }),
      file,
      { uniqueKeys: true },
    ).js;
  } catch (e) {
    if (e instanceof LeashError) throw new GatePolicyError(strictProblems(e, file));
    throw e;
  }
  return validateGatePolicy(js);
}
