/**
 * The loader of a `leash mcp --policy FILE`: the shape is the config's (src/tools/judge/fields.ts,
 * gatePolicyFileSchema); this file reads the file strictly and says what is wrong, line by line.
 */
import { GATE_DEFAULTS, gatePolicyFileSchema, toolsGateFields } from './fields.js';
import { parseStrictYaml, readPolicyFile, strictProblems } from '../../formats/yaml.js';
import { toolEntryProblem } from '../../engine/tool.js';
import { editDistance } from '../../formats/problems.js';
import type { FailMode } from '../../engine/types.js';
import { LeashError } from '../../errors.js';
import {
  compileGatePolicy,
  GatePolicyError,
  type CompiledGatePolicy,
  type CompileOptions,
  type ToolsGatePolicy,
} from './compile.js';

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

function suggest(key: string): string {
  let best: string | null = null;
  let bd = 3;
  for (const k of KNOWN) {
    const dd = editDistance(key, k);
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

/**
 * A policy file compiled for a gate run (`leash mcp --policy`, `check`, `tools policy`): the policy
 * and its decision log sink; a refused policy is LeashError config_invalid with one issue per problem.
 */
export function loadGatePolicy(
  file: string,
  opts: CompileOptions = {},
): { policy: CompiledGatePolicy; decisions: string | null } {
  try {
    const p = loadGatePolicyFile(file);
    return { policy: compileGatePolicy(p.tools, p.failMode, undefined, opts), decisions: p.decisions };
  } catch (e) {
    if (e instanceof GatePolicyError)
      throw new LeashError('config_invalid', `policy refused (${file})`, {
        file,
        issues: e.problems.map((m) => {
          // A problem reads `where: what`; the lines print `  where: what` (docs/cli.md).
          const at = /^([^:\s][^:]*): ([\s\S]*)$/.exec(m);
          return at ? { path: at[1]!, message: at[2]! } : { path: file, message: m };
        }),
      });
    throw e;
  }
}
